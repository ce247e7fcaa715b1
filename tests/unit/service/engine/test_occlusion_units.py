"""Occlusion by word and by span (service.engine.analytics.spans): grouping tokens into words from the
tokenizer's word ids, spans into token sets, their validation; and in-process, with the fake
backend, that each row masks a unit's tokens together and its effect is the reference's."""

import hashlib
import json
from types import SimpleNamespace
from typing import ClassVar

import numpy as np
import pytest
from tokenizers import Tokenizer, models, normalizers, pre_tokenizers, processors

from headwise.service.api.sizes import JSON
from headwise.service.engine.analytics.explain import occlusion_size
from headwise.service.engine.analytics.spans import (
    Unit,
    Units,
    check_spans,
    group_words,
    span_units,
    word_ranges,
    word_units,
)
from headwise.service.engine.tokenizer import TextTokenizer
from headwise.service.errors import TooLarge, Validation
from tests.unit.fakes import (
    FakeBackend,
    assert_error,
    client_for,
    fake_hidden,
    make_package,
    wait_ready,
)

# [CLS] un ##bel ##ie ##va ##bly token ##ization , [SEP]
TEXT = "unbelievably tokenization,"
OFFSETS = [(0, 0), (0, 2), (2, 5), (5, 7), (7, 9), (9, 12), (13, 18), (18, 25), (25, 26), (0, 0)]
WORDS = [(0, 12), (13, 25), (25, 26)]


def pieces_tokenizer() -> Tokenizer:
    vocab = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "the", "cat", "sat", "un", "##bel", "##ie", "##va", "##bly",
             "token", "##ization", ",", "."]
    tok = Tokenizer(models.WordPiece({t: i for i, t in enumerate(vocab)}, unk_token="[UNK]"))
    tok.normalizer = normalizers.BertNormalizer(lowercase=True)
    tok.pre_tokenizer = pre_tokenizers.BertPreTokenizer()
    tok.post_processor = processors.TemplateProcessing(single="[CLS] $A [SEP]",
                                                       special_tokens=[("[CLS]", 2), ("[SEP]", 3)])
    return tok


def message(exc) -> str:
    return exc.value.render()


# -- words ------------------------------------------------------------------------------------

def test_a_words_pieces_are_one_unit_and_special_tokens_none():
    units = group_words(OFFSETS, WORDS)
    assert units.kind == "word"
    assert units.units == [Unit(0, 12, (1, 2, 3, 4, 5)), Unit(13, 25, (6, 7)), Unit(25, 26, (8,))]


def test_a_token_in_no_word_is_a_unit_of_its_own():
    offsets = [(0, 0), (0, 3), (4, 6), (7, 9), (0, 0)]
    assert group_words(offsets, [(0, 3), (7, 9)]).units == [Unit(0, 3, (1,)), Unit(4, 6, (2,)), Unit(7, 9, (3,))]
    assert group_words([(0, 0), (0, 0)], []).units == []


def test_word_ranges_read_the_word_ids_and_skip_tokens_without_characters():
    fake = SimpleNamespace(encode=lambda text, add_special_tokens=True: SimpleNamespace(
        word_ids=[None, 0, 0, 1, 2, 2, None], offsets=[(0, 0), (0, 2), (2, 5), (6, 9), (9, 10), (10, 12), (0, 0)]))
    assert word_ranges(fake, "ignored") == [(0, 5), (6, 9), (9, 12)]


def test_word_units_with_a_real_wordpiece_tokenizer(tmp_path):
    pieces_tokenizer().save(str(tmp_path / "tokenizer.json"))
    tt = TextTokenizer(tmp_path / "tokenizer.json", max_len=32)
    enc = tt.encode([TEXT])[0]
    assert enc.offsets == OFFSETS
    assert word_units(tt, TEXT, enc).units == group_words(OFFSETS, WORDS).units
    # cut by truncation inside a word: the word keeps the pieces that are left
    cut = TextTokenizer(tmp_path / "tokenizer.json", max_len=5).encode([TEXT])[0]
    assert cut.tokens == ["[CLS]", "un", "##bel", "##ie", "[SEP]"]
    assert word_units(tt, TEXT, cut).units == [Unit(0, 7, (1, 2, 3))]


# -- spans ------------------------------------------------------------------------------------

def test_spans_hold_every_token_they_overlap_and_may_overlap():
    units = span_units(OFFSETS, [(0, 1), (4, 14), (0, 26), (4, 14)])
    assert units.kind == "span"
    assert [u.tokens for u in units.units] == [(1,), (2, 3, 4, 5, 6), tuple(range(1, 9)), (2, 3, 4, 5, 6)]
    assert [(u.start, u.end) for u in units.units] == [(0, 1), (4, 14), (0, 26), (4, 14)]


def test_a_span_holding_no_token_is_refused_by_index():
    with pytest.raises(Validation) as e:
        span_units(OFFSETS, [(0, 2), (12, 13)])  # the space between the words
    assert e.value.field == "spans" and message(e).startswith("spans[1]: characters [12, 13) hold no token")


@pytest.mark.parametrize("spans, where", [
    ([(0, 3), (3, 3)], "spans[1]"), ([(-1, 2)], "spans[0]"), ([(0, 27)], "spans[0]"), ([(5, 2)], "spans[0]"),
    ([(0, 1), (0, 1), (1, 2, 3)], "spans[2]"),
])
def test_check_spans_names_the_bad_span(spans, where):
    with pytest.raises(Validation) as e:
        check_spans(spans, len(TEXT), 10)
    assert e.value.field == "spans" and message(e).startswith(where + ": ")


def test_check_spans_limits():
    assert check_spans([[0, 26], [3, 4]], 26, 2) == [(0, 26), (3, 4)]
    with pytest.raises(Validation, match="empty"):
        check_spans([], 26, 2)
    with pytest.raises(TooLarge) as e:
        check_spans([(0, 1)] * 3, 26, 2)
    assert e.value.field == "spans" and "4 forward passes" in message(e) and "MAX_CLIENT_BATCH" in message(e)


def test_the_answer_bound_counts_each_units_text_and_tokens():
    units = Units("span", [Unit(0, 10, (1, 2)), Unit(3, 4, (2,))])
    assert (JSON.bytes(occlusion_size(4, units)) - JSON.bytes(occlusion_size(4, Units("span", [])))
            == 2 * 96 + 6 * 11 + 6 * 3)


# -- in-process, with the fake backend ----------------------------------------------------------

class MaskRecorder(FakeBackend):
    masks: ClassVar[list] = []

    def run(self, role, feeds, outputs):
        MaskRecorder.masks.append(feeds["attention_mask"].copy())
        return super().run(role, feeds, outputs)


def app(tmp_path, normalize=True, **settings):
    """The tiny package, its tokenizer one with multi-piece words."""
    pkg = make_package(tmp_path / "models", normalize=normalize)
    pieces_tokenizer().save(str(pkg / "tokenizer.json"))
    m = json.loads((pkg / "manifest.json").read_text())
    m["tokenizer"]["sha256"] = hashlib.sha256((pkg / "tokenizer.json").read_bytes()).hexdigest()
    (pkg / "manifest.json").write_text(json.dumps(m))
    return client_for(pkg, backend=MaskRecorder, **settings)


def reference(ids: list[int], units: list[list[int]]) -> list[float]:
    """1 − cos(mean of the hidden states, their mean without the unit's positions)."""
    h = fake_hidden(np.array([ids]))[0].astype(np.float64)
    full = h.mean(0)

    def cos(a, b):
        return float(a @ b / (np.linalg.norm(a) * np.linalg.norm(b)))

    return [1 - cos(full, np.delete(h, u, 0).mean(0)) for u in units]


@pytest.mark.parametrize("normalize", [True, False])
def test_word_rows_mask_every_piece_of_a_word_together(tmp_path, normalize):
    """normalize False: the engine pools last_hidden_state itself, leaving the unit out."""
    with app(tmp_path, normalize=normalize) as c:
        wait_ready(c)
        ids = c.post("/v1/tokenize", json={"inputs": TEXT}).json()["data"][0]["ids"]
        MaskRecorder.masks = []
        r = c.post("/v1/occlusion", json={"input": TEXT, "unit": "word"})
        assert r.status_code == 200, r.text
        body = r.json()
        assert body["unit"] == "word" and "effects" not in body and body["forward_passes"] == 4
        assert [(u["text"], u["start"], u["end"], u["tokens"]) for u in body["units"]] == [
            ("unbelievably", 0, 12, [1, 2, 3, 4, 5]), ("tokenization", 13, 25, [6, 7]), (",", 25, 26, [8])]
        t = len(ids)
        assert body["usage"] == {"prompt_tokens": t, "total_tokens": 4 * t}
        masks = np.concatenate(MaskRecorder.masks)
        assert sorted(int(m.sum()) for m in masks) == [t - 5, t - 2, t - 1, t]
        np.testing.assert_allclose([u["effect"] for u in body["units"]],
                                   reference(ids, [u["tokens"] for u in body["units"]]), atol=1e-6)
        units = Units("word", [Unit(u["start"], u["end"], tuple(u["tokens"])) for u in body["units"]])
        assert len(r.content) <= JSON.bytes(occlusion_size(t, units))


def test_span_rows_and_unit_token_as_the_default(tmp_path):
    with app(tmp_path) as c:
        wait_ready(c)
        default = c.post("/v1/occlusion", json={"input": TEXT}).json()
        assert c.post("/v1/occlusion", json={"input": TEXT, "unit": "token"}).json() == default
        assert set(default) == {"model", "tokens", "offsets", "effects", "forward_passes", "usage"}
        ids = c.post("/v1/tokenize", json={"inputs": TEXT}).json()["data"][0]["ids"]
        r = c.post("/v1/occlusion", json={"input": TEXT, "spans": [[4, 14], [0, 26]]})
        assert r.status_code == 200, r.text
        body = r.json()
        assert body["unit"] == "span" and body["forward_passes"] == 3 and body["tokens"] == default["tokens"]
        assert [u["text"] for u in body["units"]] == ["lievably t", TEXT]
        assert [u["tokens"] for u in body["units"]] == [[2, 3, 4, 5, 6], list(range(1, 9))]
        np.testing.assert_allclose([u["effect"] for u in body["units"]],
                                   reference(ids, [u["tokens"] for u in body["units"]]), atol=1e-6)


@pytest.mark.parametrize("body, status, where", [
    ({"unit": "sentence"}, 422, "unit: "),
    ({"unit": "word", "spans": [[0, 3]]}, 422, "unit: "),
    ({"unit": "token", "spans": [[0, 3]]}, 422, "unit: "),
    ({"spans": []}, 422, "'spans' is empty"),
    ({"spans": [[0, 3], [12, 13]]}, 422, "spans[1]: "),
    ({"spans": [[0, 3], [0, 99]]}, 422, "spans[1]: "),
    ({"spans": [[0, 3], [2, 1]]}, 422, "spans[1]: "),
    ({"spans": [[0, 3], [1]]}, 422, "spans.1"),
    ({"spans": [[0, 3], ["a", 2]]}, 422, "spans.1"),
    ({"spans": [[0, 1]] * 4}, 413, "spans has 4 ranges"),
])
def test_bad_units_and_spans_name_the_field(tmp_path, body, status, where):
    with app(tmp_path, max_client_batch=4, max_queue=8) as c:
        wait_ready(c)
        err = assert_error(c.post("/v1/occlusion", json={"input": TEXT, **body}), status,
                           "validation" if status == 422 else "too_large")
        assert err["message"].startswith(where), err["message"]


def test_limits_and_the_budget_count_unit_rows(tmp_path):
    with app(tmp_path, max_client_batch=5, max_queue=8, analytics_tokens_inflight=20,
             analytics_max_request_tokens=15) as c:
        wait_ready(c)
        err = assert_error(c.post("/v1/occlusion", json={"input": "the cat sat, the", "unit": "word"}), 413,
                           "too_large")
        assert err["message"].startswith("occlusion of 5 words of 7 tokens runs 6 forward passes, over the 5")
        # "the cat": 4 tokens; by token 5 rows (20 tokens), by word 3 rows (12)
        err = assert_error(c.post("/v1/occlusion", json={"input": "the cat"}), 413, "too_large")
        assert "HEADWISE_ANALYTICS_MAX_REQUEST_TOKENS" in err["message"]
        assert c.post("/v1/occlusion", json={"input": "the cat", "unit": "word"}).status_code == 200
        err = assert_error(c.post("/v1/occlusion", json={"input": "the cat sat.", "spans": [[0, 3], [4, 7]]}), 413,
                           "too_large")
        assert err["message"].startswith("occlusion of 2 spans of 6 tokens (3 rows of 6) costs 18 tokens")
        engine = c.app.state.engine
        held = engine.analytics.budget.admit(10, "another request")
        r = c.post("/v1/occlusion", json={"input": "the cat", "unit": "word"})
        assert_error(r, 429, "overloaded")
        assert r.headers["retry-after"] and "this request needs 12" in r.json()["error"]["message"]
        held.release()
        assert engine.analytics.budget.used == 0
        assert_error(c.post("/v1/occlusion", json={"input": "  ", "unit": "word"}), 422, "validation")


def test_the_answer_bound_is_checked_before_inference(tmp_path):
    text = "the cat sat " * 40
    with app(tmp_path, max_response_bytes=20_000, max_inflight_response_bytes=40_000) as c:
        wait_ready(c)
        MaskRecorder.masks = []
        err = assert_error(c.post("/v1/occlusion", json={"input": text, "spans": [[0, len(text)]] * 6}),
                           413, "too_large")
        assert "HEADWISE_MAX_RESPONSE_BYTES" in err["message"] and MaskRecorder.masks == []
