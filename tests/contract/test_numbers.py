"""Numbers from a command line by one rule: ASCII digits, as the user typed them."""

import pytest

from contract import ascii_seconds, ascii_whole


@pytest.mark.parametrize(
    ("text", "value"),
    [("16", 16), ("0", 0), ("007", 7), ("9" * 18, int("9" * 18))],
)
def test_a_whole_number_in_ascii_digits_is_read(text, value):
    assert ascii_whole(text) == value


@pytest.mark.parametrize("text", ["", " 16", "-16", "+16", "1_6", "１６", "16.0", "1e3", "9" * 19])
def test_anything_else_is_not_a_whole_number(text):
    """int() reads several of these (-16, +16, 1_6, full-width digits, a padded word)."""
    assert ascii_whole(text) is None


@pytest.mark.parametrize(
    ("text", "value"), [("60", 60.0), ("2.5", 2.5), ("1", 1.0), ("1e3", None), ("nan", None),
                        ("0.5", None), ("1_0", None), ("１０", None)],
)  # fmt: skip
def test_seconds_are_a_decimal_in_ascii_digits_within_the_bounds(text, value):
    assert ascii_seconds(text) == value
