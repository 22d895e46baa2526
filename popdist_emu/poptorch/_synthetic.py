"""``opts.enableSyntheticData(True)``: the device makes the inputs; no host IO.

PopTorch's synthetic mode (PopART's ``SyntheticDataMode.RandomNormal``) feeds the model
random-normal data generated on the IPU and disables host IO, to time a model "whilst
simulating perfect I/O conditions". The program still loads and passes its batches; their
values never reach the device. Here:

- functional run: each call's inputs are replaced by random ones of the same shapes and
  dtypes, drawn by numpy from the options' seed (else torch's), the call's count and the
  instance's index (each instance's IPUs make their own): floating inputs standard normal;
  integer inputs uniform over the range of the host's values for that input (a decision:
  PopART's random-normal integers would be negative class or token ids, which no program's
  labels or embeddings take, so the range the program itself feeds keeps them valid);
  boolean inputs uniform. The outputs, the loss and the training follow from them;
- simulated step: no host IO, the inputs' bytes and the outputs' (PopTorch disables host
  IO both ways) are zero; the host's CPU work preparing the batches stays, since the
  program still loads them.

References:
    PopTorch User Guide, "Reference" (``Options.enableSyntheticData``: "Use data generated
    from a random normal distribution on the IPU. Host I/O is disabled."); PopART User
    Guide, ``SyntheticDataMode``; graphcore/examples ``tutorials/tutorials/pytorch/
    efficient_data_loading`` (synthetic data to find the IO bound).
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch

from popdist_emu.poptorch._arrays import to_jax_array, to_torch

# What the simulated step's host link carries with synthetic data (``hardware.StepProfile``).
NO_HOST_IO = {"host_bytes_per_micro_batch": 0, "host_output_bytes_per_micro_batch": 0}


def synthetic_inputs(args: tuple[Any, ...], seed: int, call: int, instance: int) -> tuple[Any, ...]:
    """``args`` with each input replaced by device-made data of its shape and dtype (module
    docstring); seeded by ``seed``, the ``call``'s count and the ``instance``."""
    rng = np.random.default_rng([seed, call, instance])
    made = []
    for arg in args:
        host = to_jax_array(arg)
        if np.issubdtype(host.dtype, np.floating) or host.dtype.name == "bfloat16":
            value = rng.standard_normal(host.shape).astype(host.dtype)
        elif host.dtype == np.bool_:
            value = rng.integers(0, 2, host.shape).astype(np.bool_)
        else:
            low, high = (int(host.min()), int(host.max())) if host.size else (0, 0)
            value = rng.integers(low, high, host.shape, endpoint=True).astype(host.dtype)
        if isinstance(arg, torch.Tensor):  # in the host tensor's own dtype (int64 stays)
            made.append(to_torch(value).to(arg.dtype))
        else:
            made.append(value)
    return tuple(made)
