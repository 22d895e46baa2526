"""The digits dataset: shipped with scikit-learn, split with a fixed seed, imported lazily."""

import subprocess
import sys

import numpy as np
import pytest

from popdist_emu import load_digits_split


def test_split_is_fixed_and_disjoint():
    a, b = load_digits_split(), load_digits_split()
    assert a.train_images.shape == (1438, 8, 8, 1) and a.test_images.shape == (359, 8, 8, 1)
    assert a.train_images.dtype == np.float32 and a.train_labels.dtype == np.int32
    assert a.train_images.min() >= 0.0 and a.train_images.max() <= 1.0
    np.testing.assert_array_equal(a.test_labels, b.test_labels)
    train = {x.tobytes() for x in a.train_images}
    # Some digits are duplicated in the source data; nearly all test images are unseen.
    assert sum(x.tobytes() in train for x in a.test_images) < 10
    assert set(a.train_labels) == set(range(10))


def test_bad_fraction_fails_clearly():
    with pytest.raises(ValueError, match="`test_fraction` must lie in"):
        load_digits_split(1.0)


def test_sklearn_imported_only_when_loading():
    code = (
        "import sys, popdist_emu as p; p.Trainer; p.ReplicaLoader; p.load_digits_split; "
        "assert 'sklearn' not in sys.modules, 'sklearn imported early'"
    )
    subprocess.run([sys.executable, "-c", code], check=True, timeout=120)
