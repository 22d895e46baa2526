"""Looks up every name of ``census.csv`` as a program sees it, and prints what it found.

``python census_program.py CENSUS`` (the fallback finder on ``sys.meta_path``, as
``popdist_emu_popdist.pth`` puts it) prints a JSON object: each name -> ``"ok"`` when it
resolves, else the error's type and message. Names are attribute chains rooted at
``poptorch``, ``popdist`` or ``torch.ops.poptorch`` (a sub-module imported where an attribute
is missing, as ``import poptorch.optim`` does), at an instance of ``Options`` or
``TensorLocationSettings``, or at a ``PoplarExecutor`` wrapping a small module;
``PoplarExecutor.<module attributes>`` is the module's own attributes read through it.
"""

from __future__ import annotations

import csv
import importlib
import json
import sys
import warnings
from types import ModuleType
from typing import Any

sys.meta_path.append(
    importlib.import_module("launch._popdist_finder").PopDistFallbackFinder  # type: ignore[arg-type]
)
warnings.simplefilter("ignore")  # the no-effect names are named once; not counted here

import popdist  # noqa: E402
import popdist.poptorch  # noqa: E402
import poptorch  # noqa: E402
import torch  # noqa: E402


class _Net(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.fc = torch.nn.Linear(2, 1)
        self.custom = "a module's own attribute"

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc(x).sum()


def _walk(obj: Any, parts: list[str]) -> Any:
    for part in parts:
        try:
            obj = getattr(obj, part)
        except AttributeError as error:
            if not isinstance(obj, ModuleType) or not hasattr(obj, "__path__"):
                raise
            try:  # a sub-module not imported yet
                obj = importlib.import_module(f"{obj.__name__}.{part}")
            except ModuleNotFoundError:
                raise error from None
    return obj


def resolve(name: str, executor: Any) -> Any:
    """What ``name`` is, as a program reaches it (module docstring)."""
    root, *parts = name.split(".")
    if name == "PoplarExecutor.<module attributes>":
        for attribute in ("train", "eval", "state_dict", "named_parameters", "model", "custom"):
            getattr(executor, attribute)
        return executor.custom
    if name.startswith("poptorch.optim.Optimizer.variable_attrs."):
        optimizer = poptorch.optim.SGD(executor.model.parameters(), lr=0.1)
        return _walk(optimizer, name.split(".")[3:])
    if root == "poptorch_geometric":
        return _walk(importlib.import_module(root), parts)
    roots = {
        "poptorch": lambda: poptorch,
        "popdist": lambda: popdist,
        "torch": lambda: torch,
        "Options": poptorch.Options,
        "TensorLocationSettings": poptorch.TensorLocationSettings,
        "PoplarExecutor": lambda: executor,
    }
    return _walk(roots[root](), parts)


def main(census: str) -> None:
    executor = poptorch.trainingModel(_Net(), poptorch.Options())
    found = {}
    with open(census, newline="", encoding="utf-8") as file:
        for row in csv.DictReader(file):
            try:
                resolve(row["name"], executor)
                found[row["name"]] = "ok"
            except Exception as error:
                found[row["name"]] = f"{type(error).__name__}: {error}"
    print(json.dumps(found))


if __name__ == "__main__":
    main(sys.argv[1])
