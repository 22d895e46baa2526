"""A PopTorch training program under ``poprun-emu --offline-mode``: simulated, then ended.

PopTorch's offline IPU target compiles a program and runs nothing. Here ``compile`` and the
first call of a training model compile the step from the batch's shapes, simulate it and
report it as every offline run does (instance 0 prints the summary; ``--report-dir`` gets
``summary.json``, ``trace.json``, ``report.html``; ``poprun-emu-scaling`` gets its sweep);
the call then ends the program with exit code 0, since returning made-up outputs to its
loop would be worse.

References:
    PopTorch User Guide, "Options" (``useOfflineIpuTarget``, ``outputMode``).
"""

from __future__ import annotations

import sys
from typing import TYPE_CHECKING, Any, NoReturn

import numpy as np

import popdist_emu
from popdist_emu._options import Options
from popdist_emu._trees import tree_nbytes
from popdist_emu.poptorch._data import active_loader
from popdist_emu.poptorch._outputs import OutputMode, outputs_per_step

if TYPE_CHECKING:
    from popdist_emu.runtime import Trainer


def simulate_step(
    trainer: Trainer,
    batch: tuple[np.ndarray, ...],
    *,
    name: str,
    outputs: Any,
    fields: Options,
    mode: OutputMode,
) -> None:
    """Simulates one step of ``trainer`` on the job's IPU system and reports it, with what
    the host does: the program's data loader, and the ``outputs`` (one micro-batch's shapes,
    per replica) going back to it, each as soon as it is computed: every micro-batch's
    (``OutputMode.All``), those of every n-th device iteration (EveryN), or one copy per
    call (Final; Sum, whose sum is kept on the device), as ``mode`` says."""
    returned = outputs_per_step(mode, fields.device_iterations, fields.gradient_accumulation)
    host: dict[str, Any] = {
        "host_output_bytes_per_micro_batch": tree_nbytes(outputs),
        "outputs_per_step": returned,
    }
    loader = active_loader()
    if loader is not None:  # what the program's data loader costs the host
        cost = loader.host_cost()
        host |= {
            "host_cpu_seconds_per_sample": cost.cpu_seconds_per_sample,
            "host_workers": cost.workers,
            "host_prefetch": cost.prefetch,
        }
    simulation = popdist_emu.simulate(trainer, batch, name=name, host=host)
    popdist_emu.report_simulation(simulation, fields)


def end_program(fields: Options) -> NoReturn:
    """Ends the program after the simulated step (exit code 0), saying why on instance 0."""
    if fields.instance_index == 0:
        print(
            "[popdist-emu] offline mode: the step was compiled and simulated (above); "
            "nothing runs on an offline target, so the program ends here.",
            file=sys.stderr,
            flush=True,
        )
    raise SystemExit(0)
