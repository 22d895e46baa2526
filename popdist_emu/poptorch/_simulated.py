"""The simulated IPU of every PopTorch training run: functional, or offline and then ended.

Each distinct training program (the first call, or ``compile``, of each batch shape; later
calls with the same shapes reuse it, as PopTorch reuses the executable it compiled) is
simulated on the job's IPU system from the step's compiled shapes and reported as every run
of the emulator reports: instance 0 prints the summary (step, phases, memory per IPU,
host-bound verdict, uncertainty with the calibrated parameter set), ``--report-dir`` gets
``summary.json``, ``trace.json`` and ``report.html`` (``poprun-emu-scaling`` gets its
sweep). The simulation reads shapes only, so the numbers a functional run computes do not
change.

- Functional run: each program is reported after its first call ran, so the first one's
  trace holds the instances' measured wall-clock host track (the compile and that call,
  ``popdist_emu._host_timeline``) beside the simulated tracks; a later program (another
  batch shape, e.g. a short last batch) prints its summary and writes its reports to
  ``program-N`` under the report directory. Instance 0 also says that the wall-clock
  figures the program prints itself (items/s, seconds) are this machine's CPU, not an IPU.
- Offline run (PopTorch's offline IPU target compiles and runs nothing): the first call
  simulates, reports, then ends the program with exit code 0, since returning made-up
  outputs to its loop would be worse.
- Inference models are not simulated: the hardware model prices a training step (forward,
  backward, all-reduce, update) as ``Trainer`` compiles it, and an inference model's
  micro-batch forwards are not a ``Trainer`` step; a program's training is what its
  throughput is asked of.

References:
    PopTorch User Guide, "Options" (``useOfflineIpuTarget``, ``outputMode``) and
    "Precompilation and caching" (one executable per model and input shapes).
"""

from __future__ import annotations

import contextlib
import itertools
import os
import sys
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, Any, NoReturn

import numpy as np

import popdist_emu
from popdist_emu._options import Options
from popdist_emu._trees import tree_nbytes
from popdist_emu.poptorch._data import active_loader
from popdist_emu.poptorch._outputs import OutputMode, outputs_per_step
from popdist_emu.poptorch._synthetic import NO_HOST_IO

if TYPE_CHECKING:
    import hardware
    from popdist_emu.runtime import Trainer

WALL_CLOCK_NOTE = (
    "[popdist-emu] functional run: the numbers are computed on this machine's CPU, so "
    "wall-clock figures the program prints itself (items/s, seconds) are this machine's, "
    "not the IPU's; the simulated figures above are the IPU system's."
)


def program_key(batch: tuple[np.ndarray, ...]) -> tuple[tuple[tuple[int, ...], str], ...]:
    """What makes a call a distinct compiled program: its laid-out batch's shapes and dtypes."""
    return tuple((tuple(a.shape), str(a.dtype)) for a in batch)


def simulate_step(
    trainer: Trainer,
    batch: tuple[np.ndarray, ...],
    *,
    name: str,
    outputs: Any,
    fields: Options,
    mode: OutputMode,
    synthetic: bool = False,
) -> hardware.StepSimulation:
    """Simulates one step of ``trainer`` on the job's IPU system, with what the host does:
    the program's data loader, and the ``outputs`` (one micro-batch's shapes, per replica)
    going back to it, each as soon as it is computed: every micro-batch's
    (``OutputMode.All``), those of every n-th device iteration (EveryN), or one copy per
    call (Final; Sum, whose sum is kept on the device), as ``mode`` says; with ``synthetic``
    data no host IO runs (``_synthetic``)."""
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
            "host_cpu_relative_spread": cost.relative_spread,
            "host_workers": cost.workers,
            "host_prefetch": cost.prefetch,
        }
    if synthetic:
        host |= NO_HOST_IO
    return popdist_emu.simulate(trainer, batch, name=name, host=host)


# The programs this process reported, of all its models: the N-th goes to ``program-N``.
_REPORTED = itertools.count(1)


def report_step(simulation: hardware.StepSimulation, fields: Options) -> None:
    """Reports a distinct program as every run reports: instance 0 prints the summary, the
    report directory gets the files (the process's first program's; ``program-N`` under it
    the N-th's); a functional run's instance 0 adds ``WALL_CLOCK_NOTE``."""
    directory, program = fields.report_dir, next(_REPORTED)
    if directory and program > 1:
        directory = os.path.join(directory, f"program-{program}")
    popdist_emu.report_simulation(simulation, fields, report_dir=directory)
    if fields.instance_index == 0 and not fields.offline:
        print(WALL_CLOCK_NOTE, flush=True)


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


class SimulatedPrograms:
    """One model's distinct programs: each simulated and reported once (see the module).

    Args:
        fields: the model's options, resolved (the job, this instance, offline mode).
    """

    def __init__(self, fields: Options) -> None:
        self._fields = fields
        self._seen: dict[tuple[tuple[tuple[int, ...], str], ...], hardware.StepSimulation] = {}
        # The simulation of the program the latest call or compile ran (``getLatency``).
        self.latest: hardware.StepSimulation | None = None

    def _new(self, batch: tuple[np.ndarray, ...]) -> bool:
        """Whether ``batch``'s program was not simulated yet (``_keep`` then keeps it)."""
        key = program_key(batch)
        self.latest = self._seen.get(key)
        return key not in self._seen

    def _keep(
        self, batch: tuple[np.ndarray, ...], simulation: hardware.StepSimulation
    ) -> hardware.StepSimulation:
        """Keeps ``batch``'s program's simulation; it is the latest."""
        self._seen[program_key(batch)] = self.latest = simulation
        return simulation

    def compiled(
        self, batch: tuple[np.ndarray, ...], simulate: Callable[[], hardware.StepSimulation]
    ) -> None:
        """``compile`` offline: simulates and reports ``batch``'s program if new."""
        if self._new(batch):
            report_step(self._keep(batch, simulate()), self._fields)

    @contextlib.contextmanager
    def call(
        self, batch: tuple[np.ndarray, ...], simulate: Callable[[], hardware.StepSimulation]
    ) -> Iterator[None]:
        """Around a training call: a new program is simulated before the call and reported
        after it ran (functional: the host track then holds it), or reported and the program
        ended (offline, where every call ends it)."""
        # A step too large is refused here, at its first call.
        simulation = self._keep(batch, simulate()) if self._new(batch) else None
        if self._fields.offline:  # nothing runs offline (``compile`` may have reported it)
            if simulation is not None:
                report_step(simulation, self._fields)
            end_program(self._fields)
        yield
        if simulation is not None:
            report_step(simulation, self._fields)
