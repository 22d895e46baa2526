"""Progress: plain lines off a terminal, nothing from disabled instances."""

import io

from popdist_emu import Progress


def test_lines_every_tenth_of_the_run():
    out = io.StringIO()
    progress = Progress(20, stream=out)
    for step in range(1, 21):
        progress.update(step, 1.0 / step)
    progress.close()
    lines = out.getvalue().splitlines()
    assert len(lines) == 10
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
    assert "loss=0.2500" in out.getvalue() and "4/4" in out.getvalue()
