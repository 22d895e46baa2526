"""``import poptorch`` without a Poplar SDK, its Options and its one-line refusals (no torch)."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
from deadlines import within

import popdist_emu.poptorch as poptorch
from launch import _popdist_finder
from popdist_emu.popdist import PopTorchOptions


def test_finder_provides_poptorch_from_the_fallback_package() -> None:
    spec = _popdist_finder.PopDistFallbackFinder.find_spec("poptorch")
    assert spec is not None and spec.origin is not None
    assert os.path.join("_fallback", "poptorch") in spec.origin
    assert _popdist_finder.PopDistFallbackFinder.find_spec("poptorch.optim") is None


def test_poptorch_outside_poprun_emu_is_the_emulators() -> None:
    code = (
        "import sys; sys.meta_path.append(__import__('launch._popdist_finder', "
        "fromlist=['x']).PopDistFallbackFinder); import poptorch, popdist.poptorch; "
        "print(issubclass(popdist.poptorch.Options, poptorch.Options), "
        "poptorch.Options is popdist.poptorch.Options)"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    # PopDist's Options is a subclass of PopTorch's, as PopDist's own is; errors name each.
    assert out.stdout.strip() == "True False"


def test_options_are_popdists_mapping() -> None:
    assert poptorch.Options is PopTorchOptions
    opts = poptorch.Options().deviceIterations(2).randomSeed(3)
    opts.Training.gradientAccumulation(4)
    opts.outputMode(poptorch.OutputMode.All)
    emu = opts.to_options()
    assert (emu.device_iterations, emu.gradient_accumulation, emu.output_mode) == (2, 4, "all")
    assert opts.random_seed == 3


def test_unsupported_name_is_refused_in_one_line() -> None:
    with pytest.raises(AttributeError) as info:
        poptorch.BlockFunction  # noqa: B018
    message = str(info.value)
    assert "poptorch.BlockFunction is not supported" in message and "\n" not in message


@pytest.mark.parametrize("name", ["trainingModel", "DataLoader", "optim"])
def test_torch_backed_names_without_torch_name_the_install(name: str) -> None:
    # ``None`` in sys.modules makes ``import torch`` fail as an absent torch does.
    code = (
        "import sys; sys.modules['torch'] = None; import popdist_emu.poptorch as p\n"
        f"try:\n    p.{name}\nexcept ModuleNotFoundError as e:\n    print(e)"
    )
    out = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        check=True,
        timeout=within(120),
    )
    assert out.stdout.strip() == (
        f"poptorch.{name} runs the model with PyTorch on JAX and needs torch, which this "
        "interpreter lacks: pip install 'popdist-emu[poptorch]'."
    )


def test_all_is_static_and_complete() -> None:
    torch_backed = {"DataLoader", "inferenceModel", "optim", "trainingModel"}
    for name in set(poptorch.__all__) - torch_backed:
        assert getattr(poptorch, name) is not None


def _table_names() -> set[str]:
    """The names the first column of docs/poptorch.md's table of ``poptorch`` names gives, as
    a program writes them after ``poptorch.`` (``optim.{SGD,...}`` is ``optim``,
    ``serializedMatMul(lhs, ...)`` is ``serializedMatMul``); options' methods left out."""
    page = (Path(__file__).parents[3] / "docs" / "poptorch.md").read_text()
    table = page.split("### The names `poptorch` provides", 1)[1].split("\n\n|", 1)[1]
    names = set()
    for row in table.split("\n\n", 1)[0].splitlines()[1:]:
        cell = re.sub(r" \([^)]*\)", "", row.split("|")[1])  # remarks: who uses it
        tokens = re.findall(r"`([^`]+)`", cell)
        if not tokens or tokens[0].startswith(("opts.", "torch.")):  # an option's, torch's
            continue
        for token in tokens:
            base = re.match(r"(?:poptorch\.)?([A-Za-z_]\w*)", token)
            if base:
                names.add(base.group(1))
    return names


def test_the_documented_names_are_the_faces_names() -> None:
    """The table of provided names in docs/poptorch.md and ``poptorch.__all__`` agree both
    ways: a documented name resolves, a provided name is documented."""
    documented = _table_names()
    assert set(poptorch.__all__) <= documented, set(poptorch.__all__) - documented
    for name in documented:
        assert getattr(poptorch, name) is not None, name
    lazy = {"DataLoader", "PoplarExecutor", "trainingModel", "inferenceModel"}
    assert set(poptorch._LAZY) == lazy
    assert set(poptorch.enums.__all__) <= set(poptorch.__all__)


def test_the_ipu_model_is_accepted_as_the_emulator_itself() -> None:
    """PopTorch's IPU Model computes what an IPU computes, as the emulator does (Graphcore's
    basics tutorial ends with ``useIpuModel(True)``)."""
    with pytest.warns(UserWarning, match="useIpuModel: accepted, no effect"):
        opts = poptorch.Options().useIpuModel(True)
    assert opts.to_options().device_iterations == 1
