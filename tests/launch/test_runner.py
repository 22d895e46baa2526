"""launch._runner: a script runs as ``python script.py`` would, and a failing status is left
for the launcher before the interpreter's exit handlers run."""

import os
import subprocess
import sys

import pytest
from deadlines import within

from launch._runner import exit_status


@pytest.mark.parametrize(
    ("code", "status"), [(None, 0), (0, 0), (3, 3), (256 + 7, 7), ("bye", 1), (2.5, 1)]
)
def test_exit_status_is_the_interpreters(code, status):
    script = f"raise SystemExit({code!r})"
    real = subprocess.run([sys.executable, "-c", script], capture_output=True).returncode
    assert exit_status(code) == status == real


def test_a_script_runs_as_main_with_its_argv_and_its_folder_on_the_path(tmp_path):
    (tmp_path / "helper.py").write_text("VALUE = 7\n")
    script = tmp_path / "prog.py"
    script.write_text(
        "import sys, helper\n"
        "import atexit\n"
        "atexit.register(lambda: print('exit handler', flush=True))\n"
        "if __name__ == '__main__':\n"
        "    print(sys.argv[1:], helper.VALUE, __file__.endswith('prog.py'), flush=True)\n"
        "    sys.exit(int(sys.argv[1]))\n"
    )
    job = tmp_path / "job"
    job.mkdir()
    env = {**os.environ, "POPDIST_EMU_JOB_DIR": str(job), "POPDIST_EMU_INSTANCE_INDEX": "0"}
    for code in (0, 3):
        run = subprocess.run(
            [sys.executable, "-m", "launch._runner", str(script), str(code)],
            capture_output=True,
            text=True,
            env=env,
            cwd="/",
            timeout=within(60),
        )
        assert run.returncode == code
        assert run.stdout == f"['{code}'] 7 True\nexit handler\n"
        leaving = job / "instance-0.leaving"
        assert leaving.exists() == (code != 0)
    assert (job / "instance-0.leaving").read_text() == "3\n"


def test_an_exit_message_is_printed_before_the_status_is_left(tmp_path):
    """``sys.exit("why")``: the message reaches stderr before the launcher hears of the
    failure (it may end the job at once), and the status is 1, as without the runner."""
    script = tmp_path / "prog.py"
    script.write_text("import sys\nprint('working', flush=True)\nsys.exit('usage: bad --x')\n")
    job = tmp_path / "job"
    job.mkdir()
    layout = {"POPDIST_NUM_TOTAL_REPLICAS": "2", "POPDIST_NUM_LOCAL_REPLICAS": "1"}
    env = {
        **os.environ,
        **layout,
        "POPDIST_EMU_JOB_DIR": str(job),
        "POPDIST_EMU_INSTANCE_INDEX": "1",
    }
    run = subprocess.run(
        [sys.executable, "-m", "launch._runner", str(script)],
        capture_output=True,
        text=True,
        env=env,
        timeout=within(60),
    )
    assert (run.returncode, run.stdout, run.stderr) == (1, "working\n", "usage: bad --x\n")
    assert (job / "instance-1.leaving").read_text() == "1\n"
