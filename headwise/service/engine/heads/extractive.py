"""The extractive question-answering head (SQuAD-style answerers: `*ForQuestionAnswering`),
with what its requests ask for (SpanParams), each input's answer (Spans) and what an answer
holds. An input is a (question, context) pair, tokenised as the package's tokenizer encodes
pairs; the graphs answer `token_logits` [B, T, 2], every token's start and end logits (Devlin
et al. 2019, "BERT", §4.2: the span i..j scoring S·T_i + E·T_j).

The spans are chosen as transformers' question-answering pipeline chose them (its
`select_starts_ends` and `decode_spans`, which transformers 5 keeps in
`pipelines.document_question_answering`): start and end softmaxed over the context's tokens and
the first token, a span's score the product of its start's and its end's probabilities, end
not before start and at most `max_answer_len` tokens, the best `top_k` (fewer where fewer
spans are possible: the pipeline would fill them up with impossible ones at score 0). Each is
widened to whole words of the context (`align_to_words`) and cut from it by character offsets;
spans that then read alike but for case are one answer, their scores summed (the pipeline's
`get_answer`), so that there may be fewer than `top_k` answers. A context longer than the
model reads is refused unless `truncate`, which cuts the context alone, as the pipeline's
`truncation="only_second"` does, or `windows` (the pipeline's `max_seq_len` and
`doc_stride`), which reads it in overlapping windows and gathers the answers of them all as
the pipeline does (`gathered`; service.engine.windows); a question that leaves its context no
room is refused either way."""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import ClassVar

import numpy as np

from headwise.service.engine.internals import Ablation
from headwise.service.engine.outputs import attention_payload
from headwise.service.engine.params import AttentionSpec, Read
from headwise.service.engine.runtime import Batched, Capability
from headwise.service.engine.size import Size, total
from headwise.service.engine.tokenizer import Cut, Encoded, TextTokenizer
from headwise.service.engine.work import Entry, Inputs
from headwise.service.package import ModelPackage

ANSWER: Capability[Batched] = Capability(
    "answer", "an extractive question-answering model (`*ForQuestionAnswering`)",
    "{use}; /v1/answer serves extractive question-answering models")


@dataclass(frozen=True)
class Windows:
    """A context read in overlapping windows (transformers' question-answering pipeline)."""

    max_seq_len: int  # tokens per window, the question's and the special tokens included
    stride: int  # context tokens a window shares with the one before (`doc_stride`)


@dataclass(frozen=True)
class SpanParams:
    truncate: bool = False  # cut the context of a pair longer than max_len (only_second); else refused
    windows: Windows | None = None  # read each context in windows instead (gathered by service.engine.windows)
    top_k: int = 1  # answers per input, best first
    max_answer_len: int = 15  # tokens an answer may span
    handle_impossible_answer: bool = False  # also offer the empty answer, scored by the first token
    align_to_words: bool = True  # widen an answer to the context's whole words
    attention: AttentionSpec | None = None  # over every position of the pair
    ablate: Ablation | None = None  # heads removed (service.engine.internals)
    padded_attention: ClassVar[bool] = False
    token_strings: ClassVar[bool] = False  # a pair is encoded with its strings, offsets and words anyway
    max_tokens: ClassVar[None] = None  # cut at max_len only
    special_tokens: ClassVar[bool] = True

    @property
    def analysis(self) -> bool:
        return self.ablate is not None


@dataclass(frozen=True, slots=True)
class Span:
    answer: str  # the context's characters [start, end)
    score: float
    start: int
    end: int


@dataclass(frozen=True, slots=True)
class Spans:
    """One input's answers, best first."""

    encoding: Encoded
    answers: list[Span]
    attention: dict | None  # service.engine.outputs.attention_payload, over every position


@dataclass(frozen=True, slots=True)
class Window:
    """One window's candidate spans, best first, as characters [start, end) of its context with
    their scores, and the score of its empty answer."""

    spans: list[tuple[int, int, float]]
    null: float


def gathered(context: str, windows: list[Window], p: SpanParams) -> list[Span]:
    """An input's answers from its windows' candidates, in the windows' order, as the pipeline's
    postprocess gathers them: spans that read alike but for case are one answer, at its first
    span's characters, their scores summed (`get_answer`); with handle_impossible_answer the
    empty answer, scored by the lowest of the windows' empty answers; best first, top_k."""
    found: dict[str, Span] = {}  # by the lowered text, in the order first found
    for w in windows:
        for start, end, score in w.spans:
            text = context[start:end]
            same = found.get(key := text.lower())
            found[key] = Span(text, score, start, end) if same is None else replace(same, score=same.score + score)
    answers = list(found.values())
    if p.handle_impossible_answer:
        answers.append(Span("", min(w.null for w in windows), 0, 0))
    return sorted(answers, key=lambda a: a.score, reverse=True)[: p.top_k]


def softmax(x: np.ndarray) -> np.ndarray:
    e = np.exp(x - x.max(axis=-1, keepdims=True))
    return e / e.sum()


def choose(logits: np.ndarray, desired: np.ndarray, p: SpanParams) -> tuple[list[tuple[int, int, float]], float]:
    """[T, 2] start and end logits and the positions an answer may hold (`desired`: the
    context's tokens, and the first) → the best (start, end, score) spans and the empty
    answer's score, as transformers' `select_starts_ends` and `decode_spans` compute them."""
    start = softmax(np.where(desired == 0, -10000.0, logits[:, 0]))  # (T,)
    end = softmax(np.where(desired == 0, -10000.0, logits[:, 1]))
    null = float(start[0] * end[0])
    start[0] = end[0] = 0.0
    candidates = np.tril(np.triu(np.outer(start, end)), p.max_answer_len - 1)  # (T, T): end ≥ start, short enough
    flat = candidates.ravel()
    if p.top_k == 1:
        order = np.array([np.argmax(flat)])
    elif len(flat) <= p.top_k:
        order = np.argsort(-flat)
    else:
        part = np.argpartition(-flat, p.top_k)[: p.top_k]
        order = part[np.argsort(-flat[part])]
    starts, ends = np.unravel_index(order, candidates.shape)
    keep = desired.nonzero()[0]
    # past the possible spans the pipeline would go on listing impossible ones at score 0
    ok = np.isin(starts, keep) & np.isin(ends, keep) & (candidates[starts, ends] > 0)
    return [(int(s), int(e), float(candidates[s, e])) for s, e in zip(starts[ok], ends[ok], strict=True)], null


def in_context(enc: Encoded) -> np.ndarray:
    """(T,) 1 where a token is the context's (the pair's second text; every token of a single
    text, as warm-up sends), else 0."""
    return (enc.segments == 1).astype(np.int64) if enc.segments is not None else np.ones(enc.length, np.int64)


def span_size(p: SpanParams, enc: Encoded) -> Size:
    """What one input answers: `top_k` answers (and the empty one), each at most the context's
    characters that its tokens cover (their words too: a word reaches no further than its kept
    pieces); with attention its [L', H', T, T] weights."""
    n = p.top_k + p.handle_impossible_answer
    context = max((e for (_, e), s in zip(enc.offsets, in_context(enc), strict=True) if s), default=0)
    spans = Size(chars=n * context, values=n, indices=2 * n, records=n + 1)
    spec = p.attention
    if spec is None:
        return spans
    # the weights, and their header: its keys, the layers' and heads' indices, shape and dtypes
    return spans + Size(indices=len(spec.layers) + len(spec.heads) + 4, records=4, blocks=(spec.block(enc.length),))


class SpanHead:
    use = "use POST /v1/answer"
    cut: Cut = "only_second"  # the context, never the question, as the pipeline cuts
    labelled = False

    def __init__(self, package: ModelPackage, tokenizer: TextTokenizer | None):
        self.capabilities = frozenset({ANSWER})
        self.described = "an extractive question-answering model"

    def card(self) -> dict:
        return {}

    def pretokenised(self, inputs: Inputs) -> bool:
        return False

    def encode(self, tokenizer: TextTokenizer, inputs: Inputs, read: Read) -> list[Encoded]:
        return tokenizer.encode_items(inputs, read.truncate, words=True, cut=self.cut)  # with offsets and words

    def attention_need(self, params: SpanParams, encs: list[Encoded]) -> tuple[int, str]:
        return sum(params.attention.nbytes(e.length) for e in encs), "asked-for attention"

    def answer_size(self, params: SpanParams, encs: list[Encoded]) -> Size:
        return total(span_size(params, e) for e in encs)

    def returned_bytes(self, spec: AttentionSpec, enc: Encoded) -> int:
        return spec.returned_bytes(enc.length)

    def warm_params(self, attention: AttentionSpec | None) -> SpanParams:
        return SpanParams(attention=attention, truncate=True)

    def outputs(self, entries: list[Entry]) -> list[str]:
        return ["token_logits"]

    def answer(self, out: dict, i: int, e: Entry, weights: np.ndarray | None) -> Spans | Window:
        """Row i's answers; a window's candidates where its params read windows (their input's
        answers are gathered from them all: service.engine.windows)."""
        p: SpanParams = e.job.params
        t, enc = e.length, e.encoding
        logits = out["token_logits"][i, :t].astype("float32", copy=True)  # [T, 2]: start, end
        desired = in_context(enc)[:t]  # warm-up cuts a long encoding's ids to each length
        desired[0] = 1  # the first token ([CLS]) stands for no answer, as in the pipeline's p_mask
        spans, null = choose(logits, desired, p)
        window = Window([(*self._chars(enc, s, x, p.align_to_words), score) for s, x, score in spans], null)
        if p.windows is not None:
            return window
        context = e.job.inputs[e.index][1] if e.job.inputs is not None else ""  # none: entries made by the caller
        att = attention_payload(weights, t, p.attention) if weights is not None else None
        return Spans(enc, gathered(context, [window], p), att)

    @staticmethod
    def _chars(enc: Encoded, s: int, e: int, words: bool) -> tuple[int, int]:
        """Tokens s..e as characters [start, end) of the context, widened to their words with
        `words` (a token of no word keeps its own characters, as in the pipeline's get_indices)."""
        if words and enc.words is not None and (a := enc.words[s]) is not None and (b := enc.words[e]) is not None:
            return a[0], b[1]
        return enc.offsets[s][0], enc.offsets[e][1]
