"""headwise/service/engine/internals.py's request checks: `ablate` keys are plain ASCII digits
in range (params.ascii_index), anything else a Validation naming `ablate.<key>`, never an
exception of int()'s (issue 40, item 1)."""

import pytest

from headwise.service.engine.internals import Ablation
from headwise.service.engine.values import ascii_index
from headwise.service.errors import Validation


@pytest.mark.parametrize("text, want", [
    ("0", 0), ("5", 5), ("05", 5), ("000", 0), ("6", None), ("10", None), ("", None),
    ("²", None), ("①", None), ("٣", None), ("３", None), (" 3", None), ("3 ", None), ("+3", None),
    ("-1", None), ("1_0", None), ("3.0", None), ("0x3", None), ("9" * 5000, None), ("0" * 5000 + "3", 3),
])
def test_ascii_index(text, want):
    assert ascii_index(text, 6) == want


@pytest.mark.parametrize("key", ["²", "①", "٣", "３", "+1", " 1", "1_0", "6", "9" * 5000, "x"])
def test_a_key_other_than_ascii_digits_in_range_is_a_validation_naming_it(key):
    with pytest.raises(Validation) as e:
        Ablation.select(6, 12, {key: [0]})
    assert e.value.field.startswith("ablate.")
    assert e.value.field.removeprefix("ablate.").rstrip("…") == key[:40]
    assert len(e.value.message) < 200  # a long key is named by its first 40 characters


def test_plain_keys_select_their_layers():
    a = Ablation.select(6, 12, {"3": [2, 0], "05": [11]})
    assert a.heads == ((3, (0, 2)), (5, (11,)))
    with pytest.raises(Validation, match="given twice"):
        Ablation.select(6, 12, {"02": [0], "2": [1]})
