"""Per-instance log files for ``--output-filename DIR``, in Open MPI's layout.

Open MPI's ``mpirun --output-filename DIR`` writes each process's streams to
``DIR/1/rank.<N>/stdout`` and ``DIR/1/rank.<N>/stderr`` (job 1, MPI rank N), while the terminal
keeps the (tagged) output. The bootstrap does the same whatever MPI runs underneath, so logs
land in the same place under MPICH's Hydra as under Open MPI.

These are streams appended line by line while the program runs, not finished files, so they
are not written through ``popdist_emu._files``' rename-into-place.

References:
    Open MPI ``mpirun(1)`` (v4.1), ``--output-filename``: "Redirect the stdout, stderr, and
    stddiag of all processes to a process-unique version of the specified filename"
    (``filename/1/rank.N/stdout``).
"""

from __future__ import annotations

import os
from typing import BinaryIO

from contract import make_directories, open_for_appending_lines


def log_path(output_dir: str, instance: int, stream: str) -> str:
    """Where instance ``instance``'s ``stream`` ("stdout" or "stderr") is logged."""
    return os.path.join(output_dir, "1", f"rank.{instance}", stream)


def log_problem(output_dir: str, num_instances: int) -> str | None:
    """Why the logs of a job cannot be written safely (a symlink among the directories or
    files under ``output_dir`` that the instances would open), or None."""
    top = os.path.join(output_dir, "1")
    paths = [top] + [
        log_path(output_dir, i, stream)
        for i in range(num_instances)
        for stream in ("", "stdout", "stderr")  # "": the instance's directory
    ]
    for path in paths:
        if os.path.islink(path.rstrip(os.sep)):
            return f"{path.rstrip(os.sep)!r} is a symbolic link"
    return None


def open_log(output_dir: str, instance: int, stream: str) -> BinaryIO:
    """Opens (creating its directories) the log file of one stream of one instance.

    Never through a symlink: the directories from ``output_dir`` down are checked as they
    are made (popdist_emu._files.make_directories) and the file is opened ``O_NOFOLLOW``.
    """
    path = log_path(output_dir, instance, stream)
    make_directories(os.path.dirname(path), base=output_dir)
    return open_for_appending_lines(path)
