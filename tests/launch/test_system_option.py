"""``--system`` is checked before any instance starts: unknown names and too-small systems."""

import pytest


@pytest.mark.parametrize(
    ("words", "phrase"),
    [
        (("--system", "pod99", "--num-replicas", "4"), "is not a known IPU-POD"),
        (
            ("--system", "pod16", "--num-replicas", "32", "--num-instances", "2"),
            "has only 16 IPUs: use --system pod64",
        ),
        (
            ("--system", "bow-pod16", "--num-replicas", "16", "--ipus-per-replica", "2"),
            "has only 16 IPUs: use --system bow-pod64",
        ),
        (("--num-replicas", "131072", "--num-instances", "2"), "the largest IPU-POD has 65536"),
    ],
)
def test_refused_system_exits_2_with_one_line(poprun, words, phrase):
    # `python -c` would run if validation let it through; the refusal must come first.
    result = poprun(*words, "python", "-c", "print('started')", timeout=60)
    assert result.returncode == 2
    assert "started" not in result.stdout
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1
    assert lines[0].startswith("poprun-emu: error: ")
    assert phrase in lines[0]


def test_system_large_enough_is_accepted(poprun):
    result = poprun(
        "--system", "pod64", "--num-replicas", "2", "python", "-c", "print('started')", timeout=120
    )
    assert result.returncode == 0, result.stderr
    assert "started" in result.stdout
