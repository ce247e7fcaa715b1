"""The native API's writers (docs/api.md): one per operation, each its answer's bound in JSON
bytes beside the payload it bounds (service.api.writer). The routes (service.api.routers) call
the engine and hand its result to `responses.answer` with one of these."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, NamedTuple

from headwise.service.api.compat import token_pipeline
from headwise.service.api.sizes import (
    CHAR_BYTES,
    ENVELOPE_BYTES,
    JSON_VALUE_BYTES,
    RECORD_BYTES,
    TOKEN_BYTES,
)
from headwise.service.api.writer import Writer, counted, priced, ranked
from headwise.service.engine import prompts

NO_IDS: frozenset[int] = frozenset()


class Embedding(NamedTuple):
    """/v1/embed's request as its answer reads it."""

    tokens: bool  # output: tokens (a vector per token), else the sentence's
    prompt: prompts.Prompt | None
    used: dict | None  # the prompt as echoed (prompts.payload), None when no text was prepended
    special: frozenset[int]  # the tokenizer's special ids (to place the prompt's span)


def _embed(result, q: Embedding) -> dict:
    data = []
    for i, e in enumerate(result.data):
        item = {"index": i, "embedding": e.tokens if q.tokens else e.sentence, "tokens": e.encoding.tokens,
                "offsets": e.encoding.offsets}
        if e.attention is not None:
            item["attention"] = e.attention
        if e.hidden is not None:
            item["hidden_states"] = e.hidden
        if q.used and (where := prompts.span(q.prompt, e.encoding.ids, e.encoding.offsets, q.special)):
            item["prompt_span"] = where
        data.append(item)
    out = {"model": result.model, "data": data, "usage": result.usage}
    return {"model": result.model, "prompt": q.used, **out} if q.used else out


def _embed_bound(result, q: Embedding) -> int:
    """The engine's count, and the prompt's echo and each item's span beyond it."""
    if not q.used:
        return result.answer_bytes
    return result.answer_bytes + ENVELOPE_BYTES + CHAR_BYTES * len(q.used["text"]) + 32 * len(result.data)


EMBED = Writer(_embed_bound, _embed, "ask for fewer inputs, layers or heads, or base64")


def _rerank(r, body) -> dict:
    results = []
    for i in r.order:
        c = r.result.data[i]
        item = {"index": i, "score": r.scores[i]}
        if body.return_text:
            item["text"] = body.texts[i]
        if c.attention is not None:
            item["attention"] = c.attention
        results.append(item)
    return {"model": r.result.model, "results": results, "usage": r.result.usage}


# a Ranking and the route's body
RERANK = Writer(ranked, _rerank, "ask for fewer texts, top_n, or return_text: false")


def _predict(result, _request) -> dict:
    data = []
    for c in result.data:
        best = sorted(range(len(result.labels)), key=lambda j: -float(c.scores[j]))
        data.append([{"label": result.labels[j], "score": float(c.scores[j])} for j in best])
    return {"model": result.model, "data": data, "usage": result.usage}


# a ClassifyResult
PREDICT = Writer(lambda r, _: ENVELOPE_BYTES + r.answer_bytes, _predict, "send fewer inputs")


def per_input(result, fields: Callable[[int, Any], dict], labels: bool = False) -> dict:
    """A head's answer (a HeadResult) in the native shape: per input its `index`, `fields(i,
    answer)` and its `attention` where asked; the model, its `labels` with `labels`, the usage."""
    data = []
    for i, x in enumerate(result.data):
        item = {"index": i, **fields(i, x)}
        if x.attention is not None:
            item["attention"] = x.attention
        data.append(item)
    head = {"model": result.model, "labels": result.labels} if labels else {"model": result.model}
    return {**head, "data": data, "usage": result.usage}


def _tag(result, body) -> dict:
    labels, ignored = result.labels, set(body.ignore_labels)

    def tokens(_, t) -> dict:
        best = t.logits.argmax(axis=-1).tolist()  # one label: always it (its sigmoid is the score)
        tokens, offsets = t.encoding.tokens, t.encoding.offsets
        rows = []
        for pos in t.labelled:
            label = labels[best[pos]]
            if label in ignored:
                continue
            row = {"index": pos, "token": tokens[pos], "start": offsets[pos][0], "end": offsets[pos][1],
                   "label": label, "score": float(t.scores[pos, best[pos]])}
            if body.all_scores:
                row["scores"] = t.scores[pos].tolist()
            rows.append(row)
        return {"tokens": rows}

    return per_input(result, tokens, labels=True)


# a TagResult and the route's body; the labels' list beside the envelope
TAG = Writer(lambda r, _: r.answer_bytes + ENVELOPE_BYTES + sum(CHAR_BYTES * len(x) + 4 for x in r.labels), _tag,
             "send fewer or shorter texts")


class Tagging(NamedTuple):
    """/v1/tag's request with an aggregation_strategy, as its answer reads it."""

    texts: list[str]
    strategy: str  # simple, first, average or max
    ignore: set[str]  # ignore_labels
    pieces: token_pipeline.Pieces  # the model's tokenizer


def _entities(result, q: Tagging) -> dict:
    return per_input(result, lambda i, t: {"entities": token_pipeline.entities(
        t, result.labels, q.strategy, q.ignore, q.texts[i], q.pieces)}, labels=True)


# a TagResult as transformers' pipeline groups it: per text its entities, bounded as TEI's
# POST / bounds one text's (they may spell their text again), besides what TAG counts
ENTITIES = Writer(lambda r, q: TAG.bound(r, q) + sum(token_pipeline.size(text, t.encoding.length, r.labels)
                                                     for t, text in zip(r.data, q.texts, strict=True)),
                  _entities, "send fewer or shorter texts")


def _similarity(res, used: dict | None) -> dict:
    data = []
    for i, (enc, score) in enumerate(zip(res.targets, res.scores, strict=True)):
        item = {"index": i, "score": score}
        if res.explained is not None:
            ex = res.explained[i]
            item.update(tokens=enc.tokens, offsets=enc.offsets, contributions=ex.contributions,
                        top_pairs=[{"source": s, "target": t, "value": v} for s, t, v in ex.pairs])
        data.append(item)
    out = {"model": res.model, **({"prompt": used} if used else {}), "data": data, "usage": res.usage}
    if res.explained is not None:
        out["source"] = {"tokens": res.source.tokens, "offsets": res.source.offsets}
    return out


# a Similarity and the prompt as echoed
SIMILARITY = Writer(counted, _similarity, "send fewer targets, or a smaller top_k")


class Occluded(NamedTuple):
    """/v1/occlusion's request as its answer reads it."""

    text: str  # as the model read it (the prompt before the input)
    prompt: prompts.Prompt | None
    used: dict | None
    special: frozenset[int]


def _occlusion(res, q: Occluded) -> dict:
    enc, head = res.encoding, {"model": res.model}
    if q.used:
        head["prompt"] = q.used
        where = prompts.span(q.prompt, enc.ids, enc.offsets, q.special)
        if where:
            head["prompt_span"] = where
    if res.units is None:
        return {**head, "tokens": enc.tokens, "offsets": enc.offsets, "effects": res.effects,
                "forward_passes": res.passes, "usage": res.usage}
    units = [{"text": q.text[u.start:u.end], "start": u.start, "end": u.end, "tokens": u.tokens, "effect": effect}
             for u, effect in zip(res.units.units, res.effects, strict=True)]
    return {**head, "unit": res.units.kind, "tokens": enc.tokens, "offsets": enc.offsets,
            "units": units, "forward_passes": res.passes, "usage": res.usage}


OCCLUSION = Writer(priced, _occlusion, "send a shorter input, or fewer spans")


def _importance(res, top_k: int) -> dict:
    t, rows = res.encoding.length, res.forward_passes
    return {"model": res.model, "measure": res.measure, "baseline": res.baseline,
            "shape": list(res.effects.shape), "importance": res.effects.tolist(), "top": res.top(top_k),
            "tokens": res.encoding.tokens, "forward_passes": rows,
            "usage": {"prompt_tokens": t, "total_tokens": rows * t}}


def _importance_bound(res, top_k: int) -> int:
    """The envelope, every head's effect, the top heads ({layer, head, effect} each) and the tokens."""
    return (8 * ENVELOPE_BYTES + res.effects.size * JSON_VALUE_BYTES["float32"] + top_k * RECORD_BYTES
            + res.encoding.length * TOKEN_BYTES)


# a HeadImportance and the request's top_k
HEAD_IMPORTANCE = Writer(_importance_bound, _importance, "ask for a smaller top_k, or send a shorter input")
