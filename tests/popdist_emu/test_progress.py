"""Progress: plain lines off a terminal, nothing from disabled instances."""

import io
import time

from popdist_emu import Progress
from popdist_emu._progress import phase


def test_lines_every_tenth_of_the_run():
    out = io.StringIO()
    progress = Progress(20, stream=out)
    for step in range(1, 21):
        progress.update(step, 1.0 / step)
    progress.close()
    lines = out.getvalue().splitlines()
    assert len(lines) == 11  # the first step, then every tenth of the run
    assert lines[0] == "step 1/20 loss 1.0000"
    assert lines[-1] == "step 20/20 loss 0.0500"


def test_disabled_instance_prints_nothing():
    out = io.StringIO()
    progress = Progress(5, enabled=False, stream=out, bar=True)
    for step in range(1, 6):
        progress.update(step, 0.5)
    progress.close()
    assert out.getvalue() == ""


def test_bar_shows_the_loss():
    out = io.StringIO()
    progress = Progress(4, stream=out, bar=True)
    for step in range(1, 5):
        progress.update(step, 0.25)
    progress.close()
    text = out.getvalue()
    assert "loss=0.2500" in text and "4/4" in text and "step/s" in text  # rate and ETA


def test_phases_are_named_before_they_start_and_timed(capsys):
    out = io.StringIO()
    Progress(3, stream=out)
    with phase("compiling micro_step", "compiled micro_step"):
        assert out.getvalue() == "[popdist-emu] compiling micro_step ...\n"
    lines = out.getvalue().splitlines()
    assert lines[1].startswith("[popdist-emu] compiled micro_step in ") and lines[1].endswith(" s")
    assert capsys.readouterr().err == ""


def test_a_long_phase_says_how_long_so_far():
    out = io.StringIO()
    Progress(3, stream=out)
    with phase("compiling a big step", every=0.05):
        time.sleep(0.2)
    lines = out.getvalue().splitlines()
    assert any("compiling a big step: " in line and line.endswith(" s so far") for line in lines)
    assert lines[-1].startswith("[popdist-emu] compiling a big step in ")


def test_phases_follow_stderr_when_it_is_replaced(monkeypatch):
    # A run's phases go to stderr as it is when they are logged: an earlier run's stderr
    # (here a stream since closed, as a finished test's capture is) must not swallow them.
    earlier = io.StringIO()
    monkeypatch.setattr("sys.stderr", earlier)
    Progress(3)
    earlier.close()
    now = io.StringIO()
    monkeypatch.setattr("sys.stderr", now)
    with phase("compiling update"):
        pass
    assert now.getvalue().splitlines()[0] == "[popdist-emu] compiling update ..."
