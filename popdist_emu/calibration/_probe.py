"""``--calibrate-from``'s run: a program's step at the user's measured configurations.

Both launchers (``poprun-emu`` and ``poprun-emu-scaling``) refit the same way: the program
runs once offline, as ``poprun-emu-scaling`` runs it, and its compiled step is simulated at
every measured configuration at the calibrated parameters and one probe per fitted term (a
scaling request whose points carry parameter values: ``contract.SweepPoint.parameters``);
the terms the measurements constrain are refitted (:func:`refit`, as the published rows
are); the changed parameters and each measurement's cross-validated error are printed; and a
calibration file holding the refit is written for the job to read
(``contract.ENV_CALIBRATION_FILE``, ``Options.calibration_file``). The launchers run this
through ``python -m popdist_emu.calibration`` (``_cli``): ``launch`` stays JAX- and
SciPy-free, and ``scaling`` needs no layer above it.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path

import hardware
from contract import ENV_SCALING_REQUEST, SweepPoint, system_name, write_request
from popdist_emu.calibration._features import features_from_probes, probe_points
from popdist_emu.calibration._user import (
    Measurement,
    MeasurementError,
    UserFit,
    read_measurements,
    refit,
)


def _system(ipu: str, measurement: Measurement) -> str:
    return system_name(ipu, measurement.system, measurement.replicas * measurement.ipus_per_replica)


def refit_program(
    path: str, program: Sequence[str], system: str, folder: str
) -> tuple[Path, list[str]]:
    """Probes ``program`` at the measurements of ``path``, refits and writes the refitted
    calibration file into ``folder``.

    Args:
        path: the ``--calibrate-from`` file.
        program: the program and its arguments, as the launcher runs them.
        system: the job's ``--system`` (its IPU, Mk2 or Bow, is the measurements' default).
        folder: a private folder for the request and the file.

    Returns:
        The refitted file, and the lines to print.

    Raises:
        MeasurementError: a bad file, a configuration the program refused, or a probe run
            that ended before simulating (its last line).
    """
    measurements = read_measurements(path)
    base = hardware.load_parameters().to_json()
    probes = probe_points(base)
    ipu = "bow" if system.startswith("bow") else "mk2"
    points = [
        SweepPoint(
            m.replicas,
            m.instances,
            m.ipus_per_replica,
            _system(ipu, m),
            m.global_batch,
            tuple(values.items()),
        )
        for m in measurements
        for values in probes
    ]
    request, answer = os.path.join(folder, "request.json"), os.path.join(folder, "answer.json")
    write_request(request, points, answer)
    first = points[0]
    command = [
        sys.executable, "-m", "launch", "--offline-mode", "--offline-representative",
        "--num-replicas", str(first.replicas), "--num-instances", str(first.instances),
        "--ipus-per-replica", str(first.ipus_per_replica), "--system", first.system,
        *program,
    ]  # fmt: skip
    env = {**os.environ, ENV_SCALING_REQUEST: request}
    run = subprocess.run(command, env=env, capture_output=True, text=True, check=False)
    if not os.path.exists(answer):
        last = (run.stderr or run.stdout).strip().splitlines()[-1:] or [""]
        raise MeasurementError(
            f"--calibrate-from: the program exited with {run.returncode} before "
            f"popdist_emu.simulate: {last[0]}"
        )
    results = json.loads(Path(answer).read_text())["points"]
    features = []
    for i, m in enumerate(measurements):
        own = results[i * len(probes) : (i + 1) * len(probes)]
        if any("summary" not in r for r in own):
            raise MeasurementError(f"--calibrate-from: {m.label}: {own[0].get('reason', '')}")
        steps = [r["summary"]["simulated_step_seconds"] for r in own]
        features.append(features_from_probes(probes, steps, own[0]["summary"]["samples_per_step"]))
    fit = refit(measurements, features, base)
    file = Path(folder) / "calibration.json"
    file.write_text(json.dumps(refitted_file(fit, path), indent=1))
    return file, fit.lines(measurements)


def refitted_file(fit: UserFit, source: str) -> dict:
    """The packaged calibration file with the refit's values in place of its fits'
    parameters, and the band a refitted run earns (``UserFit.band``)."""
    data = json.loads(hardware.CALIBRATION_FILE.read_text())
    for record in [data, *data.get("families", {}).values()]:
        parameters = record.get("parameters", {})
        for name in parameters:
            parameters[name] = fit.values[name]
    seen = data["cross_validation"]["bands"]["family_seen"]
    data["calibrate_from"] = {"file": source, "parameters": fit.values, "band": fit.band(seen)}
    return data
