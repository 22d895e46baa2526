"""The IPU-only modules Graphcore's applications import, as fallbacks: ``popart`` (its enums,
PopART's names and values), ``examples_utils.load_lib`` (a note, no build) and ``horovod``
(``tests/popdist_emu/popdist_api/test_horovod.py`` runs its collectives), found by the
finder asked last, so an installed module of the same name wins.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from deadlines import within

from launch import _popdist_finder

FINDER = (
    "import sys; sys.meta_path.append(__import__('launch._popdist_finder', "
    "fromlist=['x']).PopDistFallbackFinder)\n"
)


def _python(code: str, **env: str) -> str:
    """``code`` in a fresh interpreter that finds the fallbacks as a program does."""
    out = subprocess.run(
        [sys.executable, "-W", "always", "-c", FINDER + code],
        capture_output=True,
        text=True,
        timeout=within(120),
        env={**os.environ, **env},
    )
    assert out.returncode == 0, out.stderr[-2000:]
    return out.stdout.strip() + out.stderr.strip()


@pytest.mark.parametrize("name", ["popart", "horovod", "examples_utils"])
def test_the_finder_provides_each_fallback_package(name: str) -> None:
    spec = _popdist_finder.PopDistFallbackFinder.find_spec(name)
    assert spec is not None and spec.origin is not None
    assert os.path.join("_fallback", name, "__init__.py") in spec.origin


def test_popart_has_the_enums_the_applications_read_with_poparts_values() -> None:
    """As ``ipu_options.py`` (BERT, GPT-2, ViT) and ``utils/ipu_settings.py`` (CNNs) pass them:
    ``int(popart.X.Y)``; values of PopART 3.4's ``sessionoptions.hpp``."""
    out = _python(
        "import popart\n"
        "print(int(popart.SyntheticDataMode.RandomNormal),\n"
        "      int(popart.AccumulateOuterFragmentSchedule.OverlapMemoryOptimized),\n"
        "      int(popart.SubgraphCopyingStrategy.JustInTime),\n"
        "      int(popart.RecomputationType.Standard),\n"
        "      int(popart.RecomputationType.RecomputeAll),\n"
        "      int(popart.RecomputationType.Pipeline), int(popart.SyntheticDataMode.Off))\n"
        "try:\n    popart.Builder\nexcept AttributeError as e:\n    print(e)"
    )
    values, refusal = out.splitlines()
    assert values == "2 3 1 1 4 3 0"
    assert refusal.startswith("popart.Builder is not provided by popdist-emu's popart")


def test_load_lib_notes_once_per_file_and_returns(tmp_path: Path) -> None:
    source = tmp_path / "residual_add_inplace_pattern.cpp"
    source.write_text("// cppimport\n")
    out = _python(
        "from examples_utils import load_lib\n"
        f"print(load_lib({str(source)!r}), load_lib({str(source)!r}, timeout=5))"
    )
    assert out.count("load_lib(residual_add_inplace_pattern.cpp): not built, no effect") == 1
    assert out.startswith("None None")


def test_load_lib_refuses_a_missing_file_and_other_names_in_one_line(tmp_path: Path) -> None:
    missing = tmp_path / "absent.cpp"
    out = _python(
        "import examples_utils\n"
        f"try:\n    examples_utils.load_lib({str(missing)!r})\n"
        "except FileNotFoundError as e:\n    print(e)\n"
        "try:\n    examples_utils.load_lib_all\nexcept AttributeError as e:\n    print(e)"
    )
    first, second = out.splitlines()
    assert first.startswith(f"examples_utils.load_lib({str(missing)!r}): the file does not exist")
    assert second.startswith("examples_utils.load_lib_all is not provided")


def test_an_installed_module_wins_over_the_fallback(tmp_path: Path) -> None:
    alone = _python("import popart, horovod, examples_utils\nprint(popart.__file__)")
    assert os.path.join("_fallback", "popart") in alone
    for name in ("popart", "horovod", "examples_utils"):
        (tmp_path / name).mkdir()
        (tmp_path / name / "__init__.py").write_text("REAL = True\n")
    out = _python(
        "import popart, horovod, examples_utils\n"
        "print(popart.REAL, horovod.REAL, examples_utils.REAL)",
        PYTHONPATH=os.pathsep.join([str(tmp_path), os.environ.get("PYTHONPATH", "")]),
    )
    assert out == "True True True"


def test_the_fallbacks_import_cheaply() -> None:
    """No JAX, no MPI and no GCL at import (GCL is loaded by the first collective): the
    applications import them at start-up, also where they never call a collective."""
    out = _python(
        "import popart, examples_utils, horovod.torch\n"
        "print(sorted(m for m in ('jax', 'jaxlib', 'mpi4py.MPI', 'gcl') if m in sys.modules))"
    )
    assert out == "[]"
