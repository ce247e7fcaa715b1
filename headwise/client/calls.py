"""One pure function per operation: its arguments → a Call (method, path, JSON body, and the
parser of the answer). Client and AsyncClient turn each into a method with this signature and
docstring (headwise/client/client.py), so the two clients cannot drift apart."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Generic, TypeVar
from urllib.parse import quote

from headwise.client import parse
from headwise.client.heads import (
    AnswerResult,
    FillMaskResult,
    SparseResult,
    TagResult,
)
from headwise.client.types import (
    AttentionOptions,
    EmbedResult,
    GenerateResult,
    HeadImportanceResult,
    HiddenStatesOptions,
    ModelInfo,
    OcclusionResult,
    PredictResult,
    RerankResult,
    SimilarityResult,
    TokenizeResult,
)

T = TypeVar("T")


@dataclass(frozen=True)
class Call(Generic[T]):
    method: str
    path: str
    body: dict[str, Any] | None
    parse: Callable[[Any], T]


@dataclass(frozen=True)
class StreamCall:
    """A streamed /v1/generate: the request, and what decodes its events."""

    path: str
    body: dict[str, Any]
    decoder: Callable[[], parse.GenerateStream]


def _body(fields: Mapping[str, Any], extra: Mapping[str, Any]) -> dict[str, Any]:
    """The JSON body: the fields given (None: left out, the server's default), then `extra`
    as it is (fields this client does not name yet)."""
    out = {k: (dict(v) if isinstance(v, Mapping) else v) for k, v in fields.items() if v is not None}
    out.update(extra)
    return out


def embed(inputs: str | Sequence[str], *, model: str | None = None, normalize: bool = True,
          truncate: bool = True, output: str = "sentence", attention: AttentionOptions | Mapping[str, Any] | None = None,
          hidden_states: HiddenStatesOptions | Mapping[str, Any] | None = None,
          ablate: Mapping[str, Sequence[int]] | None = None, **extra: Any) -> Call[EmbedResult]:
    """POST /v1/embed: sentence (`output="sentence"`, `result.embeddings` [N, d_model]) or token
    embeddings (`"tokens"`, each item's `embedding` [T, d_model]), float32.

    `attention` ({layers, heads, format, top_k, dtype, encoding, aggregate}; `{}` for every
    head, dense float32) puts each input's weights in `data[i].attention`: `values` [L′, H′, T, T]
    (aggregate "mean": [L′, T, T], "rollout": [T, T]; format "topk": k for the last T, with
    `indices`), decoded from JSON or base64, float16 kept as float16.

    `hidden_states` ({layers, pooling, dtype, encoding}) puts each input's chosen layers in
    `data[i].hidden_states`: one HiddenState per layer, [T, d_model] or [d_model] pooled.
    `ablate` ({"<layer>": [heads]}) answers with those heads removed before W_O. Both need a
    package exported since 2026-11-24 (its analysis graph). `extra`: further body fields."""
    layers = {str(k): list(v) for k, v in ablate.items()} if ablate is not None else None
    return Call("POST", "/v1/embed", _body(
        {"model": model, "inputs": _texts(inputs), "normalize": normalize, "truncate": truncate,
         "output": output, "attention": attention, "hidden_states": hidden_states, "ablate": layers},
        extra), parse.embed)


def tokenize(inputs: str | Sequence[str], *, model: str | None = None, truncate: bool = True,
             **extra: Any) -> Call[TokenizeResult]:
    """POST /v1/tokenize: each input's tokens, ids and [start, end) character offsets."""
    return Call("POST", "/v1/tokenize", _body(
        {"model": model, "inputs": _texts(inputs), "truncate": truncate}, extra), parse.tokenize)


def similarity(source: str, targets: Sequence[str], *, model: str | None = None, explain: bool = False,
               top_k: int | None = None, truncate: bool = True, **extra: Any) -> Call[SimilarityResult]:
    """POST /v1/similarity: the cosine of `source` with each target (`result.scores` [N],
    float64). With `explain`, each item's `contributions` [T_source, T_target] (they sum to its
    score) and its `top_k` largest `top_pairs`; `result.source` holds the source's tokens."""
    return Call("POST", "/v1/similarity", _body(
        {"model": model, "source": source, "targets": list(targets), "explain": explain,
         "top_k": top_k, "truncate": truncate}, extra), parse.similarity)


def occlusion(text: str, *, model: str | None = None, truncate: bool = True, unit: str | None = None,
              spans: Sequence[Sequence[int]] | None = None, **extra: Any) -> Call[OcclusionResult]:
    """POST /v1/occlusion: each token's effect on the sentence embedding when masked out,
    `effects` [T] (1 − cos); with unit="word" or `spans` ([start, end) character ranges), each
    unit's, `units` and `effects` [U]. `extra` fields go into the body as they are; the answer's
    other fields are in `result.raw`."""
    return Call("POST", "/v1/occlusion", _body(
        {"model": model, "input": text, "truncate": truncate, "unit": unit,
         "spans": [list(s) for s in spans] if spans is not None else None}, extra), parse.occlusion)


def rerank(query: str, texts: Sequence[str], *, model: str | None = None, top_n: int | None = None,
           raw_scores: bool = False, return_text: bool = False, truncate: bool = True,
           attention: AttentionOptions | Mapping[str, Any] | None = None, **extra: Any) -> Call[RerankResult]:
    """POST /v1/rerank with a cross-encoder: `results` best first, each with its `index` in
    `texts` and `score` (the logit's sigmoid; `raw_scores`: the logit). `attention` (as embed's,
    aggregate "none" only) adds per result `query_to_document` [L′, H′, Tq, Td] and
    `document_to_query` [L′, H′, Td, Tq], special tokens left out."""
    return Call("POST", "/v1/rerank", _body(
        {"model": model, "query": query, "texts": list(texts), "top_n": top_n, "raw_scores": raw_scores,
         "return_text": return_text, "truncate": truncate, "attention": attention}, extra), parse.rerank)


def predict(inputs: str | Sequence[str | Sequence[str]], *, model: str | None = None, raw_scores: bool = False,
            truncate: bool = True, **extra: Any) -> Call[PredictResult]:
    """POST /v1/predict with a classifier: per input its labels, best first. `inputs` as the
    server reads them: a text; a list of exactly two strings is one pair; otherwise a batch of
    texts, `[a, b]` pairs or `[text]`."""
    return Call("POST", "/v1/predict", _body(
        {"model": model, "inputs": inputs if isinstance(inputs, str) else [
            x if isinstance(x, str) else list(x) for x in inputs],
         "raw_scores": raw_scores, "truncate": truncate}, extra), parse.predict)


def tag(inputs: str | Sequence[str], *, model: str | None = None, truncate: bool = True, raw_scores: bool = False,
        all_scores: bool = False, ignore_labels: Sequence[str] | None = None, aggregation_strategy: str = "none",
        attention: AttentionOptions | Mapping[str, Any] | None = None, **extra: Any) -> Call[TagResult]:
    """POST /v1/tag with a token classifier (NER, PII): per input its tokens, each with its
    likeliest label and score; with an `aggregation_strategy` (simple, first, average, max) its
    entities, grouped as transformers' pipeline groups them. `attention` as embed's."""
    return Call("POST", "/v1/tag", _body(
        {"model": model, "inputs": inputs if isinstance(inputs, str) else list(inputs), "truncate": truncate,
         "raw_scores": raw_scores, "all_scores": all_scores,
         "ignore_labels": [ignore_labels] if isinstance(ignore_labels, str) else
                          list(ignore_labels) if ignore_labels is not None else None,
         "aggregation_strategy": aggregation_strategy, "attention": attention}, extra), parse.tag)


def answer(question: str | Sequence[str], context: str | Sequence[str], *, model: str | None = None, top_k: int = 1,
           max_answer_len: int = 15, handle_impossible_answer: bool = False, align_to_words: bool = True,
           truncate: bool = False, doc_stride: int | None = None, max_seq_len: int | None = None,
           attention: AttentionOptions | Mapping[str, Any] | None = None, **extra: Any) -> Call[AnswerResult]:
    """POST /v1/answer with an extractive question answerer: per (question, context) pair its
    best spans of the context. One pair, or lists of questions and contexts of one length.
    `truncate`: cut the context of a pair longer than the model reads (else 422);
    `doc_stride`, `max_seq_len`: read each context in overlapping windows instead, as
    transformers' question-answering pipeline does."""
    if isinstance(question, str) and isinstance(context, str):
        inputs: Any = {"question": question, "context": context}
    elif isinstance(question, str) or isinstance(context, str) or len(question) != len(context):
        raise ValueError("question and context: two texts, or two lists of one length")
    else:
        inputs = [{"question": q, "context": c} for q, c in zip(question, context, strict=True)]
    return Call("POST", "/v1/answer", _body(
        {"model": model, "inputs": inputs, "top_k": top_k, "max_answer_len": max_answer_len,
         "handle_impossible_answer": handle_impossible_answer, "align_to_words": align_to_words,
         "truncate": truncate, "doc_stride": doc_stride, "max_seq_len": max_seq_len, "attention": attention},
        extra), parse.answer)


def fill_mask(inputs: str | Sequence[str], *, model: str | None = None, top_k: int = 5,
              targets: str | Sequence[str] | None = None, truncate: bool = True,
              attention: AttentionOptions | Mapping[str, Any] | None = None, **extra: Any) -> Call[FillMaskResult]:
    """POST /v1/fill_mask with a masked language model: per input, at each of its mask tokens
    (the model card's `mask_token`) the likeliest `top_k` tokens, among `targets` if given."""
    return Call("POST", "/v1/fill_mask", _body(
        {"model": model, "inputs": inputs if isinstance(inputs, str) else list(inputs), "top_k": top_k,
         "targets": targets if targets is None or isinstance(targets, str) else list(targets),
         "truncate": truncate, "attention": attention}, extra), parse.fill_mask)


def embed_sparse(inputs: str | Sequence[str], *, model: str | None = None, decode: bool = False,
                 truncate: bool = True, attention: AttentionOptions | Mapping[str, Any] | None = None,
                 **extra: Any) -> Call[SparseResult]:
    """POST /v1/embed_sparse with a sparse encoder (SPLADE): per input, its non-zero weights over
    the vocabulary; `decode`: also each index's vocabulary entry."""
    return Call("POST", "/v1/embed_sparse", _body(
        {"model": model, "inputs": inputs if isinstance(inputs, str) else list(inputs), "decode": decode,
         "truncate": truncate, "attention": attention}, extra), parse.embed_sparse)


def _generate_body(prompt: str | None, source: str | None, model: str | None, max_new_tokens: int | None,
                   temperature: float | None, top_k: int | None, top_p: float | None, seed: int | None,
                   stop: str | Sequence[str] | None, attention: Mapping[str, Any] | None,
                   hidden_states: Mapping[str, Any] | None, extra: Mapping[str, Any]) -> dict[str, Any]:
    return _body({"model": model, "prompt": prompt, "source": source, "max_new_tokens": max_new_tokens,
                  "temperature": temperature, "top_k": top_k, "top_p": top_p, "seed": seed,
                  "stop": stop if stop is None or isinstance(stop, str) else list(stop),
                  "attention": attention, "hidden_states": hidden_states}, extra)


def generate(prompt: str | None = None, *, source: str | None = None, model: str | None = None,
             max_new_tokens: int | None = None, temperature: float | None = None, top_k: int | None = None,
             top_p: float | None = None, seed: int | None = None, stop: str | Sequence[str] | None = None,
             attention: Mapping[str, Any] | None = None, hidden_states: Mapping[str, Any] | None = None,
             **extra: Any) -> Call[GenerateResult]:
    """POST /v1/generate, not streamed: `prompt` for a decoder, `source` for an
    encoder-decoder. `attention` ({layers, heads, dtype, encoding}) adds `attention.prompt`
    [L′, H′, P, P] (decoders) and per step `self_attention` [L′, H′, 1, T_so_far] (and
    `cross_attention` [L′, H′, 1, S]); `hidden_states` ({layers, pooling, dtype, encoding})
    adds GenerateResult.hidden_states."""
    return Call("POST", "/v1/generate", _generate_body(
        prompt, source, model, max_new_tokens, temperature, top_k, top_p, seed, stop, attention, hidden_states,
        extra), parse.generate)


def generate_stream(prompt: str | None = None, *, source: str | None = None, model: str | None = None,
                    max_new_tokens: int | None = None, temperature: float | None = None, top_k: int | None = None,
                    top_p: float | None = None, seed: int | None = None, stop: str | Sequence[str] | None = None,
                    attention: Mapping[str, Any] | None = None, hidden_states: Mapping[str, Any] | None = None,
                    **extra: Any) -> StreamCall:
    """POST /v1/generate with `stream: true`: yields a GenerateToken per token (with that
    step's attention and hidden states when asked), then the GenerateResult. An error, before
    or during the stream, raises HeadwiseError when iteration reaches it."""
    body = _generate_body(prompt, source, model, max_new_tokens, temperature, top_k, top_p, seed, stop,
                          attention, hidden_states, extra)
    body["stream"] = True
    att, hid = body.get("attention") or {}, body.get("hidden_states") or {}
    dtype, encoding = att.get("dtype") or "float32", att.get("encoding") or "json"
    hidden = (hid.get("dtype") or "float32", hid.get("encoding") or "json")
    return StreamCall("/v1/generate", body, lambda: parse.GenerateStream(dtype, encoding, hidden))


def head_importance(input: str | tuple[str, str] | Sequence[str], *, model: str | None = None,
                    truncate: bool = True, raw_scores: bool = False, top_k: int = 10,
                    **extra: Any) -> Call[HeadImportanceResult]:
    """POST /v1/head_importance: each head's effect when removed alone, `importance`
    [n_layers, n_heads] (1 − cos of an embedding model's sentence embeddings; a cross-encoder's
    score minus its score without the head, for a text or a (query, document) pair), and
    `top`, the top_k largest as (layer, head, effect)."""
    item = input if isinstance(input, str) else list(input)
    return Call("POST", "/v1/head_importance", _body(
        {"model": model, "input": item, "truncate": truncate, "raw_scores": raw_scores, "top_k": top_k}, extra),
        parse.head_importance)


def models() -> Call[list[ModelInfo]]:
    """GET /v1/models: every served model's card (aliases after the packages)."""
    return Call("GET", "/v1/models", None, parse.models)


def model_info(name: str) -> Call[ModelInfo]:
    """GET /v1/models/{name}: one model's card; HeadwiseError 404 for an unknown name."""
    return Call("GET", "/v1/models/" + quote(name, safe=""), None, parse.model_info)


def _texts(inputs: str | Sequence[str]) -> str | list[str]:
    return inputs if isinstance(inputs, str) else list(inputs)
