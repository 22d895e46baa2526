"""examples/resnext.py: its grouped convolutions reach the planner; the table; bad flags."""

import jax
import jax.numpy as jnp
import pytest
from repo_scripts import load_example

from popdist_emu.programs._matmuls import matmul_ops

resnext = load_example("resnext")


def test_grouped_convolutions_of_the_forward_reach_the_planner():
    params = jax.eval_shape(lambda: resnext.init_params(jax.random.key(0), depth=50))
    images = jax.ShapeDtypeStruct((2, 224, 224, 3), jnp.uint8)
    ops = matmul_ops(jax.make_jaxpr(resnext.forward)(params, images))
    assert len(ops) == 1 + 3 * 16 + 4 + 1  # stem, 16 blocks, 4 projections, head
    assert sum(op.groups == 32 for op in ops) == 16
    assert ops[-1].kind == "matmul" and ops[-1].columns == resnext.NUM_CLASSES


def test_the_table_marks_oom_cells_and_the_best_cell():
    table = {(8, 0.35): 500.0, (8, 0.6): 520.0, (16, 0.35): 530.0, (16, 0.6): None}
    text = resnext.format_table(table)
    assert "OOM" in text
    assert "530*" in text
    assert text.splitlines()[-1] == (
        "best: batch size 16 with availableMemoryProportion 0.35 (530 images/s)"
    )


@pytest.mark.parametrize("flag", [["--available-memory-proportion", "0"], ["--proportions", "1.5"]])
def test_bad_proportions_are_refused_in_one_line(flag, capsys):
    with pytest.raises(SystemExit) as exit_info:
        resnext._parse(flag)
    assert exit_info.value.code == 2
    assert "outside (0, 1]" in capsys.readouterr().err
