"""The repository's scripts (``examples/``, ``benchmarks/``) use the project's packages only
through their public faces, import nothing of the tests, and stay small.

They are what users read and copy: a script that reaches into ``hardware._parameters`` or
``popdist_emu.scaling._cli`` breaks when a private module moves, and one that imports a test
helper breaks when the tests change. Read off the source as in ``test_package.py``
(``source_imports``), so ``import X`` followed by ``X._y`` counts too.
"""

from repo_scripts import BENCHMARKS, EXAMPLES, ROOT
from source_imports import imports

HOUSE = ("contract", "gcl", "hardware", "launch", "popdist_emu")
SCRIPTS = sorted([*EXAMPLES.rglob("*.py"), *BENCHMARKS.rglob("*.py")])
# Modules a script may find beside it: the scripts and the examples' package.
LOCAL = {path.stem for path in SCRIPTS} | {p.parent.name for p in EXAMPLES.glob("*/__init__.py")}
TEST_MODULES = {path.stem for path in (ROOT / "tests").rglob("*.py")}
MAX_LINES = 450


def _package(path):
    """The package ``path`` belongs to (its folder, if it has an ``__init__.py``), or None."""
    return path.parent.name if (path.parent / "__init__.py").is_file() else None


def _offences(path):
    """Each import of ``path`` that reaches a private name of the house or of a local module,
    or a module of the tests."""
    shown = path.relative_to(ROOT) if ROOT in path.parents else path.name
    found = []
    for line, module, names in imports(path):
        parts = module.split(".")
        where = f"{shown}:{line}: {module} {names}"
        if parts[0] in TEST_MODULES - LOCAL:
            found.append(f"{where} (a module of the tests)")
        elif parts[0] == _package(path) or not (parts[0] in HOUSE or parts[0] in LOCAL):
            continue  # a package's own modules; the standard library and third parties
        elif any(p.startswith("_") for p in parts) or any(n.startswith("_") for n in names):
            found.append(f"{where} (a private name)")
    return found


def test_scripts_use_public_names_and_nothing_of_the_tests():
    offenders = [offence for path in SCRIPTS for offence in _offences(path)]
    assert offenders == []


def test_the_check_sees_private_modules_attributes_and_test_helpers(tmp_path):
    script = tmp_path / "reach.py"
    script.write_text(
        "import hardware\nimport repo_scripts\nfrom popdist_emu.scaling import _cli\n"
        "from pipelined_training._flags import refuse\nhardware._parameters.CALIBRATION_FILE\n"
        "from popdist_emu import calibration\nimport jax\njax.numpy\n"
    )
    found = _offences(script)
    assert [f.split(": ", 1)[1] for f in found] == [
        "repo_scripts [] (a module of the tests)",
        "popdist_emu.scaling ['_cli'] (a private name)",
        "pipelined_training._flags ['refuse'] (a private name)",
        "hardware ['_parameters'] (a private name)",
    ]


def test_no_script_is_over_the_size_limit():
    sizes = {str(p.relative_to(ROOT)): len(p.read_text().splitlines()) for p in SCRIPTS}
    assert {path: n for path, n in sizes.items() if n > MAX_LINES} == {}
