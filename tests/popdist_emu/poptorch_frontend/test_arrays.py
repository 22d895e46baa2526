"""The combined batch's layout: each input split on its own, as PopTorch splits it."""

from __future__ import annotations

import numpy as np
import pytest

pytest.importorskip("torch", reason="torch is not installed (pip install -e .[poptorch])")
pytest.importorskip("torchax", reason="torchax is not installed (pip install -e .[poptorch])")

from popdist_emu.poptorch._arrays import combined_layout


def test_inputs_of_different_sizes_split_into_the_same_micro_batches() -> None:
    """ViT's pre-training: 32 images and 16 mixup coefficients over 2 device iterations x 4
    accumulation x 2 replicas: 2 images and 1 coefficient a micro-batch, in order."""
    images = np.arange(32 * 3).reshape(32, 3)
    coefficients = np.arange(16.0)
    laid_images, laid_coefficients = combined_layout((images, coefficients), 2, 4, 2)
    assert laid_images.shape == (2, 4, 2, 2, 3) and laid_coefficients.shape == (2, 4, 2, 1)
    assert laid_images[1, 2, 1].tolist() == images[26:28].tolist()
    assert laid_coefficients[1, 2, 1].tolist() == [13.0]


def test_an_input_that_does_not_split_is_refused_in_one_line() -> None:
    with pytest.raises(ValueError, match=r"batch of 12: .* = 8 in every input") as info:
        combined_layout((np.zeros((16, 2)), np.zeros(12)), 1, 4, 2)
    assert "\n" not in str(info.value)
