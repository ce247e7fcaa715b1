"""service.engine.windows: a long context's windows run as rows and each input's answers are
gathered from its own windows; the answer's bound is an input's context, not its windows' sum;
a request past the rows' limit is refused before any window is made."""

from __future__ import annotations

import asyncio
from types import SimpleNamespace

import numpy as np
import pytest

from headwise.model.sentence import default_checkpoint
from headwise.service.api.sizes import JSON
from headwise.service.engine import pair_cut, windows
from headwise.service.engine.heads.extractive import SpanHead, SpanParams, Window, Windows
from headwise.service.engine.tokenizer import TextTokenizer
from headwise.service.errors import TooLarge

MINILM = default_checkpoint() / "tokenizer.json"


def test_each_input_is_answered_from_its_own_windows_and_bounded_by_its_context():
    tok = TextTokenizer(MINILM, 128)
    pairs = [("who", "the cat sat on the mat " * 300), ("where", "in the house")]
    p = SpanParams(top_k=32, handle_impossible_answer=True, windows=Windows(64, 16))
    rows = tok.encode_windows(pairs, 64, 16, 1000)
    assert len(rows[0]) > 30 and len(rows[1]) == 1
    head = SpanHead(None, None)
    whole = JSON.bytes(head.answer_size(p, [r for ws in rows for r in ws]))  # every window's context, summed
    found = [Window([(4, 7, 0.5)], 0.2)] * len(rows[0]) + [Window([(3, 8, 0.9)], 0.01)]

    async def run_encoded(encs, params, is_disconnected=None, plain=False):
        assert plain and len(encs) == len(found)
        return found

    rt = SimpleNamespace(head=head, run_encoded=run_encoded)
    data, nbytes = asyncio.run(windows.answer(rt, pairs, rows, p, JSON, 1 << 30))
    assert nbytes == JSON.bytes(head.answer_size(p, [ws[-1] for ws in rows])) and nbytes * 20 < whole
    assert [(a.answer, a.score) for a in data[0].answers] == [("cat", pytest.approx(0.5 * len(rows[0]))), ("", 0.2)]
    assert [(a.answer, a.score) for a in data[1].answers] == [("the h", 0.9), ("", 0.01)]
    assert data[0].encoding.length == sum(w.length for w in rows[0])  # its usage: every window's tokens


def test_a_request_past_the_rows_limit_is_refused_before_any_window_is_made(monkeypatch):
    tok = TextTokenizer(MINILM, 128)
    monkeypatch.setattr("headwise.service.engine.tokenizer.windows", lambda *a: pytest.fail("windows made"))
    long = ("who", "the cat sat on the mat " * 2000)
    with pytest.raises(TooLarge, match=r"take \d{4} windows of 16 tokens or more, over the limit of 100 rows"):
        tok.encode_windows([long] * 5, 16, 10, 100)  # a window every 2 tokens: thousands, at the first pair


def test_the_count_is_the_windows_made():
    for n, a, b in ((10, 2, 5), (40, 3, 30), (200, 5, 180), (33, 0, 31)):
        segments = np.array([-1] + [0] * a + [-1] + [1] * b + [-1], dtype=np.int8)
        for max_len in range(a + 4, n):
            for stride in range(0, max_len - a - 3):
                try:
                    made = pair_cut.windows(segments, max_len, stride)
                except ValueError:
                    with pytest.raises(ValueError):
                        pair_cut.window_count(segments, max_len, stride)
                    continue
                assert pair_cut.window_count(segments, max_len, stride) == len(made)
                assert all(len(w) <= max_len for w in made) and made[-1][-2] == len(segments) - 2
