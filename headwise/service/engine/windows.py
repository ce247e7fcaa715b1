"""A question answerer's contexts read in overlapping windows, as transformers'
question-answering pipeline reads a context longer than its window (`max_seq_len`,
`doc_stride`): each window holds the whole question and the next part of the context
(TextTokenizer.encode_windows), the windows of every input run as rows of the model's batcher,
and each input's answers are gathered from its windows' candidates (heads.extractive.gathered).
An input's answer depends on its own windows alone, whatever shares their batches.

One known difference: with a byte-level tokenizer whose post-processor both adds a prefix
space and trims offsets (RobertaProcessing with add_prefix_space and trim_offsets), tokenizers
leaves untrimmed the first context token of each window after the first, so the pipeline's
answer starting there includes the leading space; here it does not (offsets come from the whole
pair's encoding). RoBERTa's own tokenizers (add_prefix_space false) read the same."""

from __future__ import annotations

from collections.abc import Awaitable, Callable

import numpy as np

from headwise.service.engine.encoded import Encoded
from headwise.service.engine.encoder import TOO_LARGE, EncoderRuntime
from headwise.service.engine.heads.extractive import SpanParams, Spans, gathered
from headwise.service.engine.size import Measure


async def answer(rt: EncoderRuntime, pairs: list[tuple[str, str]], windows: list[list[Encoded]], params: SpanParams,
                 measure: Measure, max_bytes: int,
                 is_disconnected: Callable[[], Awaitable[bool]] | None = None) -> tuple[list[Spans], int]:
    """Each pair's answers from its `windows` → (them, in input order, and the bytes the answer
    takes, checked against `max_bytes` before any window runs: an input's answers are its
    context's characters at most, as its last window reaches, whatever the windows)."""
    rows = [w for ws in windows for w in ws]
    nbytes = measure.check(rt.head.answer_size(params, [ws[-1] for ws in windows]), max_bytes, TOO_LARGE)
    found = await rt.run_encoded(rows, params, is_disconnected=is_disconnected, plain=True)
    out, at = [], 0
    for (_, context), ws in zip(pairs, windows, strict=True):
        out.append(Spans(joined(ws), gathered(context, found[at:at + len(ws)], params), None))
        at += len(ws)
    return out, nbytes


def joined(windows: list[Encoded]) -> Encoded:
    """An input's windows as one Encoded, every row's tokens in turn: what its usage counts."""
    if len(windows) == 1:
        return windows[0]
    return Encoded(np.concatenate([w.ids for w in windows]), np.concatenate([w.type_ids for w in windows]),
                   [t for w in windows for t in w.tokens], [o for w in windows for o in w.offsets],
                   np.concatenate([w.segments for w in windows]))
