"""What a source file imports, read off its source (``ast``) as a type checker reads it.

Shared by the tests of the packages' layers (``tests/popdist_emu/test_package.py``) and of
the scripts' surfaces (``tests/test_scripts.py``). The folder ``tests/`` is on ``sys.path``
(pytest puts the root ``conftest.py``'s folder there), so every test file imports this one.
"""

import ast
import importlib
import pathlib


def imports(path: pathlib.Path) -> list[tuple[int, str, list[str]]]:
    """Every module ``path`` takes names from, as ``(line, module, names)``.

    ``from X import a`` gives ``X`` with ``a``; ``import X`` (or ``import X.Y as z``) gives the
    module and every attribute the file reads from it (``X.a`` gives ``a``), so a module is
    also reached through attribute access. Relative imports are left out.
    """
    tree = ast.parse(path.read_text())
    found: list[tuple[int, str, list[str]]] = []
    bound: dict[str, str] = {}  # a name bound by ``import X`` -> X
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            found.append((node.lineno, node.module, [a.name for a in node.names]))
        elif isinstance(node, ast.Import):
            for alias in node.names:
                found.append((node.lineno, alias.name, []))
                bound[alias.asname or alias.name.split(".")[0]] = (
                    alias.name if alias.asname else alias.name.split(".")[0]
                )
    for node in ast.walk(tree):
        if (
            isinstance(node, ast.Attribute)
            and isinstance(node.value, ast.Name)
            and node.value.id in bound
        ):
            found.append((node.lineno, bound[node.value.id], [node.attr]))
    return found


def literal_all(path: pathlib.Path) -> list[str]:
    """A module's ``__all__`` as a type checker reads it: a literal list, extended only by
    ``__all__ += module.__all__`` of a module the file imports (one list of names, written
    once, as the PopDist API's)."""
    tree = ast.parse(path.read_text())
    modules = {
        alias.asname or alias.name: f"{node.module}.{alias.name}"
        for node in tree.body
        if isinstance(node, ast.ImportFrom) and node.module
        for alias in node.names
    }
    names: list[str] | None = None
    for node in tree.body:
        if isinstance(node, ast.Assign) and any(
            isinstance(t, ast.Name) and t.id == "__all__" for t in node.targets
        ):
            names = list(ast.literal_eval(node.value))
        elif (
            isinstance(node, ast.AugAssign)
            and isinstance(node.target, ast.Name)
            and node.target.id == "__all__"
            and names is not None
        ):
            value = node.value
            assert isinstance(value, ast.Attribute) and value.attr == "__all__", ast.dump(node)
            assert isinstance(value.value, ast.Name), ast.dump(node)
            names += importlib.import_module(modules[value.value.id]).__all__
    if names is None:
        raise AssertionError(f"{path} has no literal __all__")
    return names
