"""``poptorch.optim.Optimizer``, the base of PopTorch's optimisers, and ``variable_attrs``."""

from __future__ import annotations

import subprocess
import sys

import pytest
import torch
from deadlines import within

import popdist_emu.poptorch as poptorch


def test_every_poptorch_optimiser_is_a_poptorch_optimizer() -> None:
    params = [torch.nn.Parameter(torch.ones(2))]
    optim = poptorch.optim
    for make in (optim.SGD, optim.Adam, optim.AdamW, optim.RMSprop, optim.LAMB):
        assert isinstance(make(params, lr=0.1), optim.Optimizer)
    assert not isinstance(torch.optim.SGD(params, lr=0.1), optim.Optimizer)


def test_variable_attrs_mark_the_optimisers_hyperparameters() -> None:
    lamb = poptorch.optim.LAMB([torch.nn.Parameter(torch.ones(2))])
    assert not lamb.variable_attrs.isConstant("weight_decay")
    lamb.variable_attrs.markAsConstant("weight_decay")
    assert lamb.variable_attrs.isConstant("weight_decay")
    lamb.variable_attrs.markAsVariable("weight_decay")
    assert not lamb.variable_attrs.isConstant("weight_decay")
    lamb.variable_attrs.markAsConstant("max_weight_norm")  # PopTorch's own, as BERT marks it
    with pytest.raises(ValueError) as info:
        lamb.variable_attrs.markAsConstant("momentum")
    assert "LAMB.variable_attrs.markAsConstant('momentum'): not a hyper-parameter" in str(
        info.value
    )


def test_from_poptorch_optim_import_optimizer_as_a_program_does() -> None:
    code = (
        "import sys; sys.meta_path.append(__import__('launch._popdist_finder', "
        "fromlist=['x']).PopDistFallbackFinder)\n"
        "from poptorch.optim import Optimizer, SGD\nprint(issubclass(SGD, Optimizer))"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=within(300)
    )
    assert out.stdout.strip() == "True", out.stderr[-2000:]
