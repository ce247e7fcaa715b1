"""Triton's classification extension strings and the KServe classification output rules."""

from __future__ import annotations

import numpy as np
import orjson
import pytest

from headwise.service.api.routers.kserve_classify import _bound, _outputs, classification
from headwise.service.errors import InvalidRequest


def test_classification_lists_the_k_highest_as_value_index_label():
    values = np.array([[0.1, 0.7, 0.2], [0.5, 0.5, -1.0]], dtype=np.float32)
    got = classification(values, 2, ["neg", "pos", "neu"])
    assert got.tolist() == [["0.700000:1:pos", "0.200000:2:neu"],
                            ["0.500000:0:neg", "0.500000:1:pos"]]  # a tie: the lower index first
    assert classification(values, 9, ["neg", "pos", "neu"]).shape == (2, 3)  # k over n_labels: all


def test_outputs_default_to_logits_and_check_the_extension():
    assert _outputs({}, False) == {"logits": (False, 0)}
    assert _outputs({"outputs": [{"name": "scores", "parameters": {"classification": 2, "binary_data": True}}]},
                    False) == {"scores": (True, 2)}
    for bad in ({"classification": True}, {"classification": -1}, {"classification": "2"},
                {"shared_memory_region": "r"}, {"binary_data": 1}):
        with pytest.raises(InvalidRequest):
            _outputs({"outputs": [{"name": "logits", "parameters": bad}]}, False)
    with pytest.raises(InvalidRequest, match="this model has logits, scores"):
        _outputs({"outputs": [{"name": "sentence_embedding"}]}, False)


def test_bound_covers_what_is_written():
    labels = ["négatif", "positive"]
    values = np.array([[-1e10, 123456.5]], dtype=np.float32)
    strings = classification(values, 2, labels)
    assert len(orjson.dumps(strings.reshape(-1).tolist())) <= _bound({"logits": (False, 2)}, 1, labels)
    assert _bound({"logits": (True, 0), "scores": (False, 0)}, 3, labels) == 3 * 2 * 4 + 3 * 2 * 16
