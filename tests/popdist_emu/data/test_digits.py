"""The digits dataset: shipped with scikit-learn, read without importing it, split with a
fixed seed."""

import subprocess
import sys

import numpy as np
import pytest
from deadlines import within

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


def test_the_digits_are_scikit_learns():
    from sklearn.datasets import load_digits

    digits = load_digits()
    split = load_digits_split()
    images = np.concatenate([split.train_images, split.test_images])[..., 0] * 16.0
    labels = np.concatenate([split.train_labels, split.test_labels])

    def rows(pixels, targets):
        table = np.column_stack([pixels.reshape(len(targets), -1), targets])
        return table[np.lexsort(table.T[::-1])]

    np.testing.assert_array_equal(rows(images, labels), rows(digits.images, digits.target))


def test_bad_fraction_fails_clearly():
    with pytest.raises(ValueError, match="`test_fraction` must lie in"):
        load_digits_split(1.0)


def test_sklearn_is_never_imported():
    code = (
        "import sys, popdist_emu as p; p.Trainer; p.ReplicaLoader; p.load_digits_split(); "
        "assert 'sklearn' not in sys.modules, 'sklearn imported'"
    )
    subprocess.run([sys.executable, "-c", code], check=True, timeout=within(120))
