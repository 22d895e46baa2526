"""A real handwritten-digit dataset that ships with a package: nothing is downloaded.

scikit-learn's ``load_digits`` holds 1797 8x8 grey-scale digits (UCI optical recognition of
handwritten digits, 16 grey levels), read from a file inside the scikit-learn wheel. It is
imported only here, when the data is loaded, so importing the runtime stays cheap.

References:
    Alpaydin and Kaynak, "Optical Recognition of Handwritten Digits", UCI ML repository
    (1998); scikit-learn ``sklearn.datasets.load_digits``.
"""

from __future__ import annotations

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
    from sklearn.datasets import load_digits

    digits = load_digits()
    images = (digits.images / DIGITS_MAX_PIXEL).astype(np.float32)[..., None]
    labels = digits.target.astype(np.int32)
    order = np.random.default_rng(seed).permutation(len(labels))
    n_test = round(len(labels) * test_fraction)
    test, train = order[:n_test], order[n_test:]
    return DigitsSplit(images[train], labels[train], images[test], labels[test])
