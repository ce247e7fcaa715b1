"""Similarity (with its exact token-pair explanation) and occlusion: whole operations over an
encoder runtime's analytics batcher (after plain work; on the served fast graph: fp32, int8 or
fp16 alike), admitted at their token cost (AnalyticsLane.budget), post-processed off the
event loop (AnalyticsLane.run).

- similarity: the cosines of the source's sentence embedding with each target's, the very
  embeddings /v1/embed returns (normalize true); with `explain`, each cosine split over token
  pairs (service.engine.analytics.pair_contributions), exact for mean pooling only.
- occlusion: for each position i of one input, 1 − cos(e, e₋ᵢ), e₋ᵢ the embedding with
  attention_mask 0 at i (that token neither attended to nor pooled): T + 1 rows; or for each
  unit (a word's pieces, a span's tokens: service.engine.analytics.spans) with all its positions at 0
  together: U + 1 rows.

Formulas and limits: docs/analytics.md.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass

import numpy as np

from headwise.service.engine.analytics.cosine import cosine, pair_contributions, top_pairs
from headwise.service.engine.analytics.lane import AnalyticsLane
from headwise.service.engine.analytics.spans import Units
from headwise.service.engine.budget import work
from headwise.service.engine.params import Embedded, EmbedParams, usage
from headwise.service.engine.runtime import Analyser
from headwise.service.engine.size import Measure, Size
from headwise.service.engine.tokenizer import Encoded
from headwise.service.errors import TooLarge, Validation


@dataclass(frozen=True)
class Explained:
    """One target's split of its score: contributions [T_source, T_target] sum to it."""

    contributions: np.ndarray  # float32
    pairs: list[tuple[int, int, float]]  # (source index, target index, value), largest first


@dataclass(frozen=True)
class Similarity:
    model: str
    version: str
    source: Encoded
    targets: list[Encoded]
    scores: list[float]
    explained: list[Explained] | None
    answer_bytes: int  # what the engine's Measure said the answer (similarity_size) takes, when it checked it

    @property
    def n_tokens(self) -> int:
        return self.source.length + sum(e.length for e in self.targets)

    @property
    def usage(self) -> dict:
        return usage(self.n_tokens)


@dataclass(frozen=True)
class Occlusion:
    model: str
    version: str
    encoding: Encoded
    effects: list[float]  # per row but the first: 1 − cos(full, with that position or unit masked out)
    units: Units | None = None  # None: one row per position (unit "token")

    @property
    def passes(self) -> int:
        return occlusion_rows(self.encoding.length, self.units)

    @property
    def answer(self) -> Size:
        return occlusion_size(self.encoding.length, self.units)

    @property
    def usage(self) -> dict:
        return usage(self.encoding.length, self.encoding.length * self.passes)


def occlusion_rows(t: int, units: Units | None) -> int:
    """Forward passes: the input whole, then one per position (T) or per unit."""
    return (t if units is None else len(units)) + 1


def occlusion_size(t: int, units: Units | None) -> Size:
    """What the answer holds: each token's string and offsets, and each position's effect, or
    each unit's text, start, end, token indices and effect."""
    n = Size(tokens=t, records=4)  # the answer's keys and usage
    if units is None:
        return n + Size(values=t)
    return n + Size(records=len(units), values=2 * len(units), chars=sum(u.end - u.start for u in units.units),
                    indices=sum(len(u.tokens) for u in units.units))


def similarity_size(model: str, source: int, targets: list[int], explain: bool, top_k: int) -> Size:
    """What the answer holds: its envelope (the model's name, usage), each target's score, and
    with explain each target's tokens and offsets, [T_s, T_t] contributions and top pairs, and
    the source's tokens."""
    n = Size(records=3 + len(targets), chars=len(model))
    if explain:
        n += Size(tokens=source + sum(targets), values=sum(source * t for t in targets),
                  records=sum(min(top_k, source * t) for t in targets))
    return n


async def similarity(rt: Analyser, encs: list[Encoded], explain: bool, top_k: int, measure: Measure, cap: int,
                     lane: AnalyticsLane, is_disconnected: Callable[[], Awaitable[bool]] | None = None) -> Similarity:
    """encs: the source, then the targets, tokenised and checked for max_len. Their rows are
    admitted against the analytics budget; the split runs off the event loop."""
    if explain and rt.package.pooling != "mean":  # (models without embeddings: refused before)
        raise Validation(f"explain needs mean pooling: model {rt.name!r} pools with {rt.package.pooling!r}, and a "
                         "cosine of single-token (CLS) embeddings has no exact split over token pairs; "
                         "ask without explain")
    source, targets = encs[0], encs[1:]
    size = similarity_size(rt.name, source.length, [e.length for e in targets], explain, top_k)
    priced = measure.check(size, cap, "send fewer or shorter targets, or ask without explain")
    params = EmbedParams(sentence=True, tokens=explain, normalize=True)
    cost = sum(work(1, e.length, "fast") for e in encs)
    with lane.budget.admit(cost, f"similarity of {len(encs)} texts ({cost} tokens)").held():
        data = await rt.run_encoded(encs, params, None, is_disconnected)
        # held until the split is done: the rows' token embeddings are alive until then
        scores, explained = await lane.run(_split, data, explain, top_k)
    rt.series.analytic("similarity_explain" if explain else "similarity").inc()
    return Similarity(rt.name, rt.package.version, source, targets, scores, explained, priced)


def _split(data: list[Embedded], explain: bool, top_k: int) -> tuple[list[float], list[Explained] | None]:
    """The source's (data[0]) cosine with each target's, and with `explain` its split."""
    src = data[0]
    scores = [cosine(src.sentence, d.sentence) for d in data[1:]]
    if not explain:
        return scores, None
    explained = []
    for d in data[1:]:
        _, c = pair_contributions(src.tokens, d.tokens)
        explained.append(Explained(c, top_pairs(c, top_k)))
    return scores, explained


async def occlusion(rt: Analyser, enc: Encoded, max_rows: int, lane: AnalyticsLane, measure: Measure, cap: int,
                    is_disconnected: Callable[[], Awaitable[bool]] | None = None,
                    units: Units | None = None) -> Occlusion:
    """enc: the input, tokenised and checked; its rows (the input whole, then one per masked
    position, or per unit with all its positions masked) go through the analytics batcher as
    one job, admitted against the analytics budget at rows · T tokens."""
    t = enc.length
    rows = occlusion_rows(t, units)
    what = f"{t} tokens" if units is None else f"{len(units)} {units.kind}s of {t} tokens"
    if rows > max_rows:
        raise TooLarge(f"occlusion of {what} runs {rows} forward passes, over the {max_rows} inputs one request "
                       "may ask for (HEADWISE_MAX_CLIENT_BATCH); send a shorter input")
    if units is None:
        holes: list[tuple[int, ...]] = [(), *((i,) for i in range(t))]
    else:
        holes = [(), *(tuple(u.tokens) for u in units.units)]
        measure.check(occlusion_size(t, units), cap, f"send fewer or shorter {units.kind}s")
    params = EmbedParams(sentence=True, normalize=True)
    cost = work(rows, t, "analysis")  # rows with holes run on the analysis graph (EncoderRuntime._graph)
    with lane.budget.admit(cost, f"occlusion of {what} ({rows} rows of {t})").held():
        data = await rt.run_encoded([enc] * rows, params, holes, is_disconnected)
        effects = await lane.run(_effects, data)
    rt.series.analytic("occlusion").inc()
    return Occlusion(rt.name, rt.package.version, enc, effects, units)


def _effects(data: list[Embedded]) -> list[float]:
    full = data[0].sentence
    return [1.0 - cosine(full, d.sentence) for d in data[1:]]
