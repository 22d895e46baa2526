"""Runs an instance's Python script so the launcher learns its exit code before MPI does.

``python -m launch._runner script.py [args]`` runs the script as ``python script.py`` would
(``runpy.run_path`` as ``__main__``, ``sys.argv`` and ``sys.path[0]`` set alike), and when it
ends with a non-zero code (``sys.exit(3)``, an uncaught exception) writes that code to
``$JOB_DIR/instance-<i>.leaving`` at once, before the interpreter's exit handlers run. Those
handlers include gcl's, which waits for the peers before ``MPI_Finalize``: a peer waiting in a
collective for this instance would otherwise fail first, and the launcher would name the
waiting peer and its code 1 instead of this instance and its own code.

References:
    Python documentation, ``runpy.run_path`` and ``SystemExit`` (its ``code``: None is 0, an
    integer is the status, anything else is printed and gives 1).
"""

from __future__ import annotations

import contextlib
import os
import runpy
import sys
from types import TracebackType

from contract import InstanceEnvironment, leaving_path, write_atomically
from launch._orphan_watch import watch_bootstrap


def exit_status(code: object) -> int:
    """The process status ``SystemExit(code)`` gives, as the interpreter computes it."""
    if code is None:
        return 0
    if isinstance(code, int):
        return code & 0xFF
    return 1


def _leaving(status: int) -> None:
    """Tells the launcher this instance is ending with ``status`` (only a failure matters)."""
    if status == 0:
        return
    try:
        view = InstanceEnvironment.from_environ()
        if view.job_dir and os.path.isdir(view.job_dir):
            write_atomically(leaving_path(view.job_dir, view.instance), f"{status}\n")
    except Exception as error:  # never in the way of the program's own ending
        print(f"poprun-emu runner: could not record exit status {status}: {error}", file=sys.stderr)


def main() -> None:
    """``python -m launch._runner script.py [args]``."""
    script, *args = sys.argv[1:]
    with contextlib.suppress(Exception):  # never in the way of the program
        watch_bootstrap(InstanceEnvironment.from_environ())
    sys.argv = [script, *args]
    sys.path[0] = os.path.dirname(os.path.abspath(script))
    try:
        runpy.run_path(script, run_name="__main__")
    except SystemExit as end:
        status = exit_status(end.code)
        if status and not isinstance(end.code, int):
            print(end.code, file=sys.stderr)  # as the interpreter prints sys.exit("why")
        _flush()  # what the program printed reaches the launcher before its status does
        _leaving(status)
        raise SystemExit(status) from None
    except KeyboardInterrupt:
        raise  # the interpreter's own ending (killed by SIGINT), as without the runner
    except BaseException as error:
        # The traceback as ``python script.py`` prints it: from the script's frame, without
        # this runner's and runpy's, through the hook in force (gcl's ends the job at once).
        trimmed = _from_script(error.__traceback__, script)
        sys.excepthook(type(error), error.with_traceback(trimmed), trimmed)
        _flush()
        _leaving(1)
        raise SystemExit(1) from None


def _flush() -> None:
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(OSError, ValueError, AttributeError):  # closed, replaced
            stream.flush()


def _from_script(tb: TracebackType | None, script: str) -> TracebackType | None:
    """The traceback from the script's first frame on (all of it if none is found)."""
    path, first = os.path.abspath(script), tb
    while tb is not None and os.path.abspath(tb.tb_frame.f_code.co_filename) != path:
        tb = tb.tb_next
    return tb if tb is not None else first


if __name__ == "__main__":
    main()
