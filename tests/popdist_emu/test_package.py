"""popdist_emu's face: a static ``__all__``, JAX-free PopDist imports, one-way sub-packages.

The rules are read off the source (``ast``), as a type checker reads them, so a name that
only a lazy ``__getattr__`` could find, or an import that reaches into another sub-package's
private module, fails here rather than in a user's IDE or in a later refactor.
"""

from __future__ import annotations

import ast
import importlib
import pathlib
import subprocess
import sys

import pytest
from deadlines import within
from source_imports import imports, literal_all

import popdist_emu

PACKAGE = pathlib.Path(popdist_emu.__file__).parent
SUBPACKAGES = sorted(p.parent.name for p in PACKAGE.glob("*/__init__.py"))
# Which sub-packages each may import (the layers, one-way); the base modules (top-level
# ``popdist_emu._*``) are open to all.
ALLOWED = {
    "popdist": set(),
    "pipeline": set(),
    "data": set(),
    "reports": set(),
    "programs": set(),
    "runtime": {"pipeline", "programs", "popdist"},
    "sim": {"data", "pipeline", "programs", "reports", "runtime"},
    "scaling": {"reports", "sim"},
    "poptorch": {"data", "pipeline", "popdist", "runtime", "sim"},
    "calibration": set(),  # the fits use hardware, contract and SciPy, never the runtime
}
MAX_LINES = 450


def _lazy_homes() -> dict[str, str]:
    """Each name of ``popdist_emu``'s face -> the module that defines it (a star import's
    names -> that module)."""
    homes = {}
    for node in ast.walk(ast.parse((PACKAGE / "__init__.py").read_text())):
        if isinstance(node, ast.ImportFrom) and node.module and node.module != "__future__":
            for alias in node.names:
                if alias.name == "*":
                    exported = importlib.import_module(node.module).__all__
                    homes.update(dict.fromkeys(exported, node.module))
                else:
                    homes[alias.asname or alias.name] = node.module
    return homes


def _imports(path: pathlib.Path) -> list[tuple[int, str, list[str]]]:
    """Every module ``path`` takes names from (``source_imports.imports``), where a name of
    ``popdist_emu``'s face counts as an import of the sub-package that defines it."""
    homes = _lazy_homes()
    resolved = []
    for line, module, names in imports(path):
        if module == "popdist_emu":
            for name in names:
                resolved.append((line, homes.get(name, f"popdist_emu.{name}"), [name]))
            continue
        resolved.append((line, module, names))
    return resolved


def test_the_sub_packages_are_the_layered_ones():
    assert sorted(ALLOWED) == SUBPACKAGES


def test_top_level_all_is_static_and_every_name_imports():
    names = literal_all(PACKAGE / "__init__.py")
    assert names == popdist_emu.__all__
    assert len(names) == len(set(names))
    for name in names:
        assert getattr(popdist_emu, name) is not None, name


def test_type_checkers_see_every_lazy_name_and_all_names_each():
    """Every exported name is imported at module level or under ``if TYPE_CHECKING:`` (where
    the lazy ones are found on first use), and every name imported there is exported."""
    homes = {
        name: module
        for name, module in _lazy_homes().items()
        if module.split(".")[0] in ("popdist_emu", "contract") and not name.startswith("_")
    }
    assert set(popdist_emu.__all__) == set(homes)
    for name in ("simulated_system", "atomic_write", "Trainer"):
        assert getattr(popdist_emu, name) is getattr(importlib.import_module(homes[name]), name)


@pytest.mark.parametrize("name", SUBPACKAGES)
def test_each_sub_package_exports_what_its_all_names(name):
    module = importlib.import_module(f"popdist_emu.{name}")
    names = literal_all(PACKAGE / name / "__init__.py")
    assert names == module.__all__
    for exported in names:
        try:
            assert hasattr(module, exported), f"popdist_emu.{name}.{exported}"
        except ModuleNotFoundError as error:  # poptorch's torch-backed names, without torch
            assert "pip install 'popdist-emu[poptorch]'" in str(error), error


@pytest.mark.parametrize("name", SUBPACKAGES)
def test_sub_packages_import_one_way_through_public_faces(name):
    offenders = []
    for path in sorted((PACKAGE / name).glob("*.py")):
        for line, module, names in _imports(path):
            parts = module.split(".")
            if parts[0] != "popdist_emu" or len(parts) < 2 or parts[1].startswith("_"):
                continue  # another package, or the base modules
            target = parts[1]
            if target == name:
                continue
            where = f"{path.relative_to(PACKAGE)}:{line}: from {module} import {names}"
            if target not in ALLOWED[name]:
                offenders.append(f"{where} (layer: {name} may import {sorted(ALLOWED[name])})")
            elif len(parts) > 2 or any(n.startswith("_") for n in names):
                offenders.append(f"{where} (a private name of popdist_emu.{target})")
    assert offenders == []


def test_base_modules_import_no_sub_package():
    offenders = [
        f"{path.name}:{line}: {module}"
        for path in sorted(PACKAGE.glob("*.py"))
        for line, module, _ in _imports(path)
        if module.startswith("popdist_emu.")
        and not module.split(".")[1].startswith("_")
        and path.name != "__init__.py"
    ]
    assert offenders == []


def test_no_module_is_over_the_size_limit():
    roots = [
        PACKAGE,
        *(PACKAGE.parent / name for name in ("contract", "gcl", "hardware", "launch")),
    ]
    sizes = {
        str(path.relative_to(PACKAGE.parent)): len(path.read_text().splitlines())
        for root in roots
        for path in root.rglob("*.py")
    }
    assert {path: n for path, n in sizes.items() if n > MAX_LINES} == {}


@pytest.mark.parametrize(
    "statement",
    [
        "import popdist_emu",
        "import popdist_emu.popdist",
        "from popdist_emu.scaling import main",  # poprun-emu-scaling refuses bad input at once
        "import popdist, popdist.poptorch, popdist.popart, popdist.tensorflow",
        "import popdist_emu.arguments",
    ],
)
def test_popdist_imports_stay_jax_free(statement):
    code = (
        f"import sys; {statement}; print(sorted(m for m in ('jax', 'jaxlib') if m in sys.modules))"
    )
    out = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        timeout=within(120),
        check=True,
    )
    assert out.stdout.strip() == "[]"


# The house, one-way: which of the project's packages each may import (through its face).
HOUSE = {
    "hardware": set(),
    "contract": {"hardware"},
    "gcl": {"contract", "hardware"},
    "launch": {"contract", "hardware"},
    "popdist_emu": {"contract", "gcl", "hardware"},
}
ROOT = PACKAGE.parent


def _modules(package: str) -> list[pathlib.Path]:
    """The package's modules: files whose every folder up to the package has an
    ``__init__.py`` (``launch/_shim/popdist`` is the ``popdist`` package the instances import,
    kept beside the launcher as data, not a module of ``launch``)."""
    top = ROOT / package
    return [
        path
        for path in sorted(top.rglob("*.py"))
        if all((d / "__init__.py").is_file() for d in path.parents if top in (d, *d.parents))
    ]


def _house_imports(package: str) -> list[tuple[str, str, list[str]]]:
    """``(where, module, names)`` of every import of another package of the house."""
    out = []
    for path in _modules(package):
        for line, module, names in _imports(path):
            top = module.split(".")[0]
            if top in HOUSE and top != package:
                out.append((f"{path.relative_to(ROOT)}:{line}", module, names))
    return out


@pytest.mark.parametrize("package", sorted(HOUSE))
def test_the_house_is_layered_and_each_package_is_used_through_its_face(package):
    offenders = []
    for where, module, names in _house_imports(package):
        top, _, rest = module.partition(".")
        if top not in HOUSE[package]:
            offenders.append(f"{where}: {module} (layer: {package} may import {HOUSE[package]})")
        elif rest.split(".")[0].startswith("_") or any(n.startswith("_") for n in names):
            offenders.append(f"{where}: {module} {names} (a private name of {top})")
    assert offenders == []


def test_the_layer_check_sees_attribute_access_and_face_names(tmp_path):
    program = tmp_path / "reach.py"
    program.write_text(
        "import popdist_emu\nimport hardware as hw\nfrom popdist_emu import Trainer\n"
        "popdist_emu.simulate(1)\nhw._pipeline.x\n"
    )
    found = {(module, tuple(names)) for _, module, names in _imports(program)}
    assert ("popdist_emu.sim", ("simulate",)) in found
    assert ("popdist_emu.runtime", ("Trainer",)) in found
    assert ("hardware", ("_pipeline",)) in found


def test_no_test_folder_shadows_a_fallback_module():
    # ``popdist``, ``poptorch`` and the fallbacks come from a finder asked last, so a test folder
    # of one's name on the tests' sys.path would be imported in its place (a namespace package).
    tests = pathlib.Path(__file__).parents[1]
    folders = {path.name for path in tests.rglob("*") if path.is_dir()}
    assert folders.isdisjoint({"popdist", "poptorch", "popart", "horovod", "examples_utils"})
