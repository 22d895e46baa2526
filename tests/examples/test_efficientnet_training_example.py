"""examples/efficientnet_training.py: the tiny EfficientNet learns the digits pipelined over two
IPUs; EfficientNet-B0 and B4 have their published parameter counts; Graphcore's G16 variant
and pipeline split; the refusals."""

import math
import os
from unittest import mock

import jax
import jax.numpy as jnp
import pytest
from repo_scripts import load_example


@pytest.fixture(scope="module")
def efficientnet():
    return load_example("efficientnet_training")


def _count(shapes) -> int:
    return sum(math.prod(x.shape) for x in jax.tree.leaves(shapes))


def test_b0_and_b4_have_their_published_parameter_counts(efficientnet):
    # Depthwise convolutions, expansion 6: the trainable parameters of Keras' EfficientNetB0
    # and EfficientNetB4 (Tan and Le 2019: 5.3 M and 19 M), the norms' scales and shifts
    # counted as batch norm's.
    assert _count(efficientnet._shapes("b0", jnp.float16, 1, 6)) == 5_288_548
    assert _count(efficientnet._shapes("b4", jnp.float16, 1, 6)) == 19_341_616
    assert len(efficientnet.block_names("b4")) == 32  # 1.8 x (1, 2, 2, 3, 3, 4, 1), rounded up


def test_g16_convolutions_have_16_channels_per_group(efficientnet):
    shapes = efficientnet._shapes("b4", jnp.float16, 16, 4)
    # block2a: 24 input filters (16 x 1.4, rounded to 8) expanded 4 times to 96 channels,
    # convolved in 6 groups of 16.
    assert shapes["block2a"]["conv"]["w"].shape == (3, 3, 16, 96)
    # The first block expands by 1 whatever --expand-ratio says: no expansion convolution.
    assert "expand" not in shapes["block1a"]
    assert shapes["top"]["conv"]["w"].shape == (1, 1, 448, 1792)


def test_graphcore_split_at_block4a_puts_ten_blocks_on_ipu_0(efficientnet):
    counts = efficientnet.blocks_per_ipu("b4", ["block4a"], None, 2)
    assert counts == [10, 22]  # stages 1-3: 2 + 4 + 4 | stages 4-7: 6 + 6 + 8 + 2
    stages = efficientnet.stages("b4", counts)
    assert stages[0].blocks[:2] == ("stem", "block1a") and stages[0].blocks[-1] == "block3d"
    assert stages[1].blocks[0] == "block4a" and stages[1].blocks[-1] == "top"


def test_the_tiny_efficientnet_learns_the_digits_on_two_pipelined_ipus(efficientnet, capsys):
    with mock.patch.dict(os.environ, {"POPDIST_NUM_IPUS_PER_REPLICA": "2"}):
        report = efficientnet.main([])
    capsys.readouterr()
    assert report["gradient_accumulation"] == 3  # 2 x 2 stages - 1
    assert report["final_loss"] < 0.6 * report["first_loss"]
    assert report["accuracy"] > 0.5  # ten classes: chance is 0.1


@pytest.mark.parametrize(
    ("splits", "counts", "ipus", "words"),
    [
        (["block4a"], None, 4, "gives 2 stages for --ipus-per-replica 4: name 3 blocks"),
        (["block9a"], None, 2, "'block9a' is not a block after the first"),
        (["block1a"], None, 2, "'block1a' is not a block after the first"),
        (["block5a", "block4a"], None, 3, "must name blocks in order, once each"),
        (["block4a"], "10,22", 2, "not both"),
    ],
)
def test_a_bad_split_is_refused_in_one_line(efficientnet, capsys, splits, counts, ipus, words):
    with pytest.raises(SystemExit) as exit_:
        efficientnet.blocks_per_ipu("b4", splits, counts, ipus)
    assert exit_.value.code == 2
    err = capsys.readouterr().err.strip()
    assert words in err and "\n" not in err and err.startswith("efficientnet_training.py: ")
