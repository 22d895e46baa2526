"""A small job for the checkpoint test: trains the test's tiny model through poprun-emu.

``checkpoint_job.py STEPS CKPT_DIR OUT [--resume]``: with ``--resume`` it starts from
``CKPT_DIR``'s checkpoint; it always checkpoints at the end, and instance 0 writes the final
parameters to OUT.
"""

import sys

import jax
import numpy as np
from test_checkpoint import ADAMW, data, init_params, loss_fn  # the script's directory

from popdist_emu import Options, ReplicaLoader, Trainer
from popdist_emu.popdist.api import getInstanceIndex
from popdist_emu.runtime._checkpoint import restore_checkpoint, save_checkpoint


def main(steps: int, directory: str, out: str, resume: bool) -> None:
    options = Options(replicated_tensor_sharding=True)  # shards follow the layout
    trainer = Trainer(loss_fn, ADAMW, init_params(), options)
    first = restore_checkpoint(directory, trainer)["step"] if resume else 0
    loader = ReplicaLoader(data(), 2, options, seed=3)
    for call in range(first, steps):
        trainer.step(loader.batch(call))
    save_checkpoint(directory, trainer)
    if getInstanceIndex() == 0:
        leaves = jax.tree_util.tree_leaves(trainer.params)
        np.savez(out, *[np.asarray(x) for x in leaves])


if __name__ == "__main__":
    main(int(sys.argv[1]), sys.argv[2], sys.argv[3], "--resume" in sys.argv[4:])
