"""examples/resnext_training.py: the tiny ResNeXt learns the digits pipelined over two IPUs;
ResNeXt-101 32x4d's shapes; Graphcore's pipeline split and the refusals."""

import math
import os
from unittest import mock

import jax
import jax.numpy as jnp
import pytest
from repo_scripts import load_example


@pytest.fixture(scope="module")
def resnext():
    return load_example("resnext_training")


def test_graphcore_split_puts_the_stem_and_eleven_units_on_ipu_0(resnext):
    counts = resnext.units_per_ipu("101", "stage3unit4", None, 2)
    assert counts == [11, 22]  # stage1: 3, stage2: 4, stage3: 4 | 19 + stage4: 3
    stages = resnext.stages("101", counts)
    assert stages[0].blocks[:2] == ("stem", "stage1unit1")
    assert stages[0].blocks[-1] == "stage3unit4"
    assert stages[1].blocks[0] == "stage3unit5" and stages[1].blocks[-1] == "head"
    assert [s.ipu for s in stages] == [0, 1]


def test_resnext101_32x4d_has_its_published_parameter_count(resnext):
    shapes = resnext._shapes("101", jnp.float16)
    count = sum(math.prod(x.shape) for x in jax.tree.leaves(shapes))
    assert 44_100_000 < count < 44_250_000  # 44.2 M (Xie et al. 2017), norms included
    # The grouped 3x3 convolutions: 32 groups of 4 channels in the first stage.
    assert shapes["stage1unit1"]["conv2"]["w"].shape == (3, 3, 4, 128)


def test_the_tiny_resnext_learns_the_digits_on_two_pipelined_ipus(resnext, capsys):
    with mock.patch.dict(os.environ, {"POPDIST_NUM_IPUS_PER_REPLICA": "2"}):
        report = resnext.main([])
    capsys.readouterr()
    assert report["gradient_accumulation"] == 3  # 2 x 2 stages - 1
    assert report["final_loss"] < 0.6 * report["first_loss"]
    assert report["accuracy"] > 0.5  # ten classes: chance is 0.1


@pytest.mark.parametrize(
    ("split", "counts", "ipus", "words"),
    [
        ("stage3unit4", None, 4, "--split-after splits 2 IPUs"),
        ("stage9unit1", None, 2, "'stage9unit1' is not a unit before the last"),
        ("stage4unit3", None, 2, "'stage4unit3' is not a unit before the last"),
        ("stage3unit4", "10,23", 2, "not both"),
    ],
)
def test_a_bad_split_is_refused_in_one_line(resnext, capsys, split, counts, ipus, words):
    with pytest.raises(SystemExit) as exit_:
        resnext.units_per_ipu("101", split, counts, ipus)
    assert exit_.value.code == 2
    err = capsys.readouterr().err.strip()
    assert words in err and "\n" not in err and err.startswith("resnext_training.py: ")
