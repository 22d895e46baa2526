"""A real handwritten-digit dataset that ships with a package: nothing is downloaded.

scikit-learn's ``load_digits`` holds 1797 8x8 grey-scale digits (UCI optical recognition of
handwritten digits, 16 grey levels), read from ``sklearn/datasets/data/digits.csv.gz`` inside
the scikit-learn wheel. This module reads that same file directly (found without importing
scikit-learn), because importing ``sklearn.datasets`` pulls in SciPy's statistics modules:
about 1-2 s of every instance's start-up on an idle 2-core machine, measured with cProfile.

References:
    Alpaydin and Kaynak, "Optical Recognition of Handwritten Digits", UCI ML repository
    (1998); scikit-learn ``sklearn.datasets.load_digits``.
"""

from __future__ import annotations

import importlib.util
import os
from typing import NamedTuple

import numpy as np

DIGITS_MAX_PIXEL = 16.0


class DigitsSplit(NamedTuple):
    """Train and test splits; images ``[n, 8, 8, 1]`` float32 in [0, 1], labels int32."""

    train_images: np.ndarray
    train_labels: np.ndarray
    test_images: np.ndarray
    test_labels: np.ndarray


def load_digits_split(test_fraction: float = 0.2, *, seed: int = 0) -> DigitsSplit:
    """Loads the digits and splits them into train and test sets with a fixed seed.

    Args:
        test_fraction: share of the 1797 samples held out for the test set, in (0, 1).
        seed: the split's seed; the default gives the same split on every run and machine.
    """
    if not 0.0 < test_fraction < 1.0:
        raise ValueError(
            f"load_digits_split: `test_fraction` must lie in (0, 1), got {test_fraction}; "
            f"e.g. 0.2 holds out a fifth of the digits."
        )
    data = np.loadtxt(digits_file(), delimiter=",")
    images = (data[:, :-1].reshape(-1, 8, 8) / DIGITS_MAX_PIXEL).astype(np.float32)[..., None]
    labels = data[:, -1].astype(np.int32)
    order = np.random.default_rng(seed).permutation(len(labels))
    n_test = round(len(labels) * test_fraction)
    test, train = order[:n_test], order[n_test:]
    return DigitsSplit(images[train], labels[train], images[test], labels[test])


def digits_file() -> str:
    """The path of the digits ``load_digits`` reads, found without importing scikit-learn.

    Raises:
        FileNotFoundError: scikit-learn is not installed, or its wheel lacks the file.
    """
    spec = importlib.util.find_spec("sklearn")
    locations = list(spec.submodule_search_locations or []) if spec is not None else []
    for root in locations:
        path = os.path.join(root, "datasets", "data", "digits.csv.gz")
        if os.path.exists(path):
            return path
    raise FileNotFoundError(
        "the handwritten digits ship with scikit-learn (sklearn/datasets/data/digits.csv.gz), "
        "which is not installed here: pip install scikit-learn."
    )
