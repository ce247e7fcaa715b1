"""The engine: the served models and the whole operations routers call (docs/architecture.md).

Routers call `Engine.embed`, `Engine.tokenize`, `Engine.classify`, `Engine.rerank`, `Engine.tag`
and `Engine.generate`, one call per request; those raise service.errors' domain errors for client
mistakes and never touch HTTP. Each served model is a Runtime (service.engine.runtime): an
EncoderRuntime with its head (embeddings, logits, per-token logits) or a GenerativeRuntime; an
operation narrows the model to the capability it needs (`Capability.of`: Embedder, Classifier,
Tagger, Generator, Analyser), never to its class.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable
from concurrent.futures import ThreadPoolExecutor
from functools import partial
from typing import TypeVar, overload

from headwise.service.backends import open_backend
from headwise.service.backends.onnxruntime import check_precision
from headwise.service.cpu import lowered_thread
from headwise.service.engine import matryoshka, windows
from headwise.service.engine.analytics import explain as operations
from headwise.service.engine.analytics.drift import DriftSampler
from headwise.service.engine.analytics.explain import Occlusion, Similarity
from headwise.service.engine.analytics.importance import Importance, head_importance
from headwise.service.engine.analytics.lane import AnalyticsLane
from headwise.service.engine.analytics.spans import check_spans, span_units, word_units
from headwise.service.engine.budget import ResponseBudget, ShareOf, TokenBudget
from headwise.service.engine.classify import ClassifyParams, ClassifyResult, HeadResult
from headwise.service.engine.encoder import BackendFactory, EncoderRuntime
from headwise.service.engine.generation import GenerativeRuntime
from headwise.service.engine.generation.runtime import Generation
from headwise.service.engine.generation.sequence import GenerateInput
from headwise.service.engine.heads.embedding import token_ids
from headwise.service.engine.heads.extractive import ANSWER, SpanParams
from headwise.service.engine.heads.tokens import TagParams, TagResult
from headwise.service.engine.params import EmbedParams, EmbedResult, RequestParams
from headwise.service.engine.prompts import check_default_prompt_name
from headwise.service.engine.runtime import Batched, Capability, Classifier, R, Runtime
from headwise.service.engine.size import Measure
from headwise.service.engine.tokenizer import Encoded, Truncate
from headwise.service.errors import (
    FIELD,
    InvalidRequest,
    NotFound,
    NotReady,
    TooLarge,
    Validation,
)
from headwise.service.metrics import Metrics
from headwise.service.package import find_packages
from headwise.service.settings import Settings

log = logging.getLogger("headwise.service")

TOKENIZER_THREADS = 2  # the pool that tokenises /v1/tokenize, the analytics routes and generation prompts
# (embed and classify batches tokenise on their batcher's threads)
T = TypeVar("T")  # what tokenising on those threads gives back (Engine._tokenised)


class Engine:
    def __init__(self, settings: Settings, metrics: Metrics, backend_factory: BackendFactory | None = None, *,
                 measure: Measure):
        self.settings = settings
        self.metrics = metrics
        self.measure = measure  # what an answer takes as its protocol writes it (service.api.sizes.JSON)
        self.responses = ResponseBudget(settings.max_inflight_response_bytes, metrics.response_bytes)
        # Analytics answers are built on the lowest priority, so they may hold no more than half
        # of the in-flight response bytes (and one whole answer at least): plain answers keep the rest.
        share = max(settings.max_inflight_response_bytes // 2, settings.max_response_bytes)
        self.analytics = AnalyticsLane(
            TokenBudget(settings.analytics_tokens_inflight, settings.analytics_max_request_tokens,
                        metrics.analytics_tokens),
            ShareOf(self.responses, share, "analytics answers being built or sent"))
        self.drift = (DriftSampler(settings.attention_sample, metrics, self.analytics.pool)
                      if settings.attention_sample > 0 else None)  # head drift (service.engine.analytics.drift)
        self.backend_factory = backend_factory or open_backend
        self.models: dict[str, Runtime] = {}
        self.ready = False
        self.draining = False
        self.failed: str | None = None
        # Process mode: why the whole server is not ready yet though this front-end is (a
        # sibling still starting), or None; set by server.frontend.
        self.waiting_for: Callable[[], str | None] | None = None
        self._tok_pool = ThreadPoolExecutor(max_workers=TOKENIZER_THREADS, thread_name_prefix="headwise-tokenize")

    def load_packages(self) -> None:
        """Read and verify every package (hashes included); raises PackageError."""
        packages = find_packages(self.settings.models_dir)
        check_precision(packages, self.settings.precision, self.settings.provider)
        for pkg in packages:
            cls = GenerativeRuntime if pkg.generative else EncoderRuntime
            self.models[pkg.name] = cls(pkg, self.settings, self.metrics, self.measure)
        check_default_prompt_name(self.settings.default_prompt_name, packages)
        matryoshka.check_setting(self.settings, packages)

    def prepare(self) -> None:
        """Create sessions and warm up (blocking: run it off the event loop), on a thread of
        lower priority whose onnxruntime pools inherit it (see lower_thread_priority)."""
        with lowered_thread() as pool:
            pool.submit(self._prepare).result()

    def _prepare(self) -> None:
        for rt in self.models.values():
            rt.load(self.backend_factory)
            if getattr(rt.backend, "warmed", False):  # process mode: the engine process warmed them
                continue
            t0 = time.perf_counter()
            rt.warm_up()
            log.info("model %s warmed up in %.2fs", rt.name, time.perf_counter() - t0)

    def start(self) -> None:
        for rt in self.models.values():
            rt.start()
            rt.ready = True
        self.ready = True

    def abort(self) -> None:
        """Grace period over: every request still waiting gets 503 now."""
        for rt in self.models.values():
            rt.abort(NotReady("server shutting down; the grace period is over"))

    async def close(self, timeout: float = 5.0) -> None:
        self.ready = False
        for rt in self.models.values():
            await rt.close(timeout)
        self._tok_pool.shutdown(wait=False, cancel_futures=True)
        self.analytics.close()

    # -- used by routers -------------------------------------------------------------------
    def check_live(self) -> None:
        if self.failed:
            raise NotReady("model failed to load; see the server log")

    def check_ready(self, rt: Runtime | None = None) -> None:
        """Raises NotReady unless the server (and `rt`, if given) takes requests now."""
        if self.draining:
            raise NotReady("draining")
        if self.failed:
            raise NotReady(self.failed)
        if not self.ready:
            raise NotReady("model not loaded or warming up")
        if self.waiting_for is not None and (why := self.waiting_for()):
            raise NotReady(why)
        if rt is not None and not rt.ready:
            raise NotReady(f"model {rt.name} is not ready")

    @overload
    def get(self, name: str | None) -> Runtime: ...

    @overload
    def get(self, name: str | None, needs: Capability[R]) -> R: ...

    def get(self, name, needs=None):
        """The model `name` (a package's, or an alias of one: HEADWISE_SERVED_MODEL_NAMES; the only
        one when None), narrowed to `needs` when given (Validation when it lacks it)."""
        if name is None:
            if len(self.models) != 1:
                raise Validation(f"several models are served ({', '.join(sorted(self.models))}); name one in 'model'")
            rt = next(iter(self.models.values()))
        else:
            rt = self.models.get(name)
            if rt is None:
                rt = self.models.get(self.settings.served_model_names.get(name, ""))
            if rt is None:
                served = [*self.models, *self.settings.served_model_names]
                raise NotFound(f"no model by that name; served: {', '.join(sorted(served))}")
        return rt if needs is None else needs.of(rt)

    def check_inputs(self, texts: list, field: str = "inputs") -> None:
        """Empty, too many inputs, a text (or either text of a pair) too long, not ready."""
        if not texts:
            raise InvalidRequest(f"'{FIELD}' is empty", field=field)
        if len(texts) > self.settings.max_client_batch:
            raise TooLarge(f"{len(texts)} inputs; at most {self.settings.max_client_batch} per request", field=field)
        cap = self.settings.max_input_chars
        for i, t in enumerate(texts):  # before any tokenisation: a huge string costs a len()
            for part in (t,) if isinstance(t, str) else t if isinstance(t, tuple) else ():
                if isinstance(part, str) and len(part) > cap:
                    raise TooLarge(f"{FIELD}[{i}] has {len(part)} characters; at most {cap} per input", field=field)
        self._ready()

    def _ready(self) -> None:
        if self.failed:
            raise NotReady(self.failed)
        if not self.ready or self.draining:
            raise NotReady("the server is draining" if self.draining else "model not loaded or warming up")

    async def _encode(self, rt: Runtime, texts: list[str], truncate: Truncate, special_tokens: bool = True,
                      whole: bool = False, field: str = "inputs") -> list[Encoded]:
        if whole:
            def work():
                _ = rt.tokenizer.special_ids  # TEI's /tokenize reads it next, on the loop: built here, once
                return rt.tokenizer.encode_whole(texts, special_tokens)
        else:
            work = partial(rt.tokenizer.encode, texts, truncate, special_tokens, field)
        return await self._tokenised(rt, work)

    async def _tokenised(self, rt: Runtime, work: Callable[[], T]) -> T:
        """`work` on the tokenizer threads, timed in the model's tokenize metric."""
        t0 = time.perf_counter()
        out = await asyncio.get_running_loop().run_in_executor(self._tok_pool, work)
        self.metrics.tokenize_duration.labels(model=rt.name).observe(time.perf_counter() - t0)
        return out

    async def tokenize(self, rt: Runtime, texts: list[str], truncate: bool, special_tokens: bool = True,
                       whole: bool = False) -> list[Encoded]:
        """Each text's tokens; `special_tokens=False` without [CLS]/[SEP]; `whole`: every token,
        neither cut nor checked against max_len (TEI's /tokenize)."""
        self.check_inputs(texts)
        return await self._encode(rt, texts, truncate, special_tokens, whole)

    async def decode(self, rt: Runtime, seqs: list[list[int]], skip_special_tokens: bool = True) -> list[str]:
        """Token ids back to text (TEI's /decode); ids outside the vocabulary raise Validation."""
        self.check_inputs(seqs, field="ids")
        loop = asyncio.get_running_loop()
        return await loop.run_in_executor(self._tok_pool, rt.tokenizer.decode, seqs, skip_special_tokens)

    async def embed(self, rt: Runtime, inputs: list, params: EmbedParams,
                    is_disconnected: Callable[[], Awaitable[bool]] | None = None) -> EmbedResult:
        """Every input's embedding (and attention) as `params` asks. `inputs` may be token-id
        lists instead of texts, used as they are (no special tokens added)."""
        self.check_inputs(inputs)
        emb = Capability.EMBED.of(rt)
        emb.head.check(params)
        if token_ids(inputs):
            emb.tokenizer.check_ids(inputs)
        data, nbytes, timing = await emb.submit(inputs, params, is_disconnected)
        if self.drift is not None:
            self.drift.offer(emb, inputs, params, data)
        return EmbedResult(emb.name, emb.package.version, data, nbytes, timing)

    async def classify(self, rt: Runtime, inputs: list[str | tuple[str, str]], params: ClassifyParams,
                       is_disconnected: Callable[[], Awaitable[bool]] | None = None) -> ClassifyResult:
        """Every input's logits and scores (and attention), in input order. An input is a text
        or an (a, b) pair (a list of two texts is taken as a pair)."""
        items = [x if isinstance(x, str) else tuple(x) for x in inputs]
        self.check_inputs(items)
        if any(len(x) != 2 for x in items if isinstance(x, tuple)):
            raise Validation(f"each of '{FIELD}' is a text or a pair of two texts", field="inputs")
        return await self._classify(Capability.CLASSIFY.of(rt), items, params, is_disconnected, "inputs")

    async def rerank(self, rt: Runtime, query: str, texts: list[str], params: ClassifyParams,
                     is_disconnected: Callable[[], Awaitable[bool]] | None = None) -> ClassifyResult:
        """classify of the (query, text) pairs, in texts' order (routers sort). The query and
        every text are held to max_input_chars; the pair to max_len tokens."""
        self.check_inputs(texts, field="texts")
        if len(query) > self.settings.max_input_chars:
            raise TooLarge(f"{FIELD} has {len(query)} characters; at most {self.settings.max_input_chars}",
                           field="query")
        Capability.CLASSIFY.of(rt)  # a model of another kind hears what it serves first
        # pair i is texts[i]: its errors (too many tokens) name texts[i]
        return await self._classify(Capability.RERANK.of(rt), [(query, t) for t in texts], params, is_disconnected,
                                    "texts")

    async def _classify(self, rt: Classifier, items: list, params: ClassifyParams,
                        is_disconnected: Callable[[], Awaitable[bool]] | None, field: str) -> ClassifyResult:
        data, nbytes, timing = await rt.submit(items, params, is_disconnected, field)
        return HeadResult(rt.name, rt.package.version, list(rt.package.labels), data, nbytes, timing)

    async def tag(self, rt: Runtime, texts: list[str], params: TagParams,
                  is_disconnected: Callable[[], Awaitable[bool]] | None = None) -> TagResult:
        """Every text's tokens with each label's score (and attention), in input order."""
        return await self.submit(rt, Capability.TAG, texts, params, is_disconnected)

    async def submit(self, rt: Runtime, needs: Capability[Batched], items: list, params: RequestParams,
                     is_disconnected: Callable[[], Awaitable[bool]] | None = None,
                     field: str = "inputs") -> HeadResult:
        """What the head that declares `needs` answers for every item (a text or a pair: what
        the head encodes), in input order: a kind's one call here, for a kind whose answer
        needs nothing else of the engine (a tagger's, a question answerer's)."""
        self.check_inputs(items, field)
        head = needs.of(rt)
        data, nbytes, timing = await head.submit(items, params, is_disconnected, field)
        return HeadResult(head.name, head.package.version, list(head.package.labels), data, nbytes, timing)

    async def answer(self, rt: Runtime, pairs: list[tuple[str, str]], params: SpanParams,
                     is_disconnected: Callable[[], Awaitable[bool]] | None = None,
                     field: str = "inputs") -> HeadResult:
        """Capability.ANSWER's `submit`; with `params.windows`, each context read in overlapping
        windows, as transformers' question-answering pipeline reads it (service.engine.windows)."""
        if params.windows is None:
            return await self.submit(rt, ANSWER, pairs, params, is_disconnected, field)
        self.check_inputs(pairs, field)
        answerer = ANSWER.of(rt)
        if params.attention is not None:
            raise Validation(f"{FIELD}: not served with doc_stride (each window has weights of its own)",
                             field="attention")
        w = params.windows
        rows = await self._tokenised(rt, partial(rt.tokenizer.encode_windows, pairs, w.max_seq_len, w.stride,
                                                 self.settings.max_client_batch, field))
        data, nbytes = await windows.answer(answerer, pairs, rows, params, self.measure,
                                            self.settings.max_response_bytes, is_disconnected)
        return HeadResult(answerer.name, answerer.package.version, list(answerer.package.labels), data, nbytes)

    async def similarity(self, rt: Runtime, source: str, targets: list[str], explain: bool, truncate: Truncate,
                         top_k: int, is_disconnected: Callable[[], Awaitable[bool]] | None = None) -> Similarity:
        """Cosines of the source's embedding with each target's (explained: split over token
        pairs). The source and targets count as 1 + len(targets) inputs: inputs[0] is the
        source, inputs[i] targets[i − 1] in messages."""
        if not targets:
            raise InvalidRequest("'targets' is empty", field="targets")
        texts = [source, *targets]
        self.check_inputs(texts)
        Capability.EMBED.of(rt)
        encs = await self._encode(rt, texts, truncate)  # checked against max_len (TextTokenizer.encode)
        return await operations.similarity(Capability.ANALYSE.of(rt), encs, explain, top_k, self.measure,
                                           self.settings.max_response_bytes, self.analytics, is_disconnected)

    async def occlusion(self, rt: Runtime, text: str, truncate: bool,
                        is_disconnected: Callable[[], Awaitable[bool]] | None = None, unit: str | None = None,
                        spans: list | None = None) -> Occlusion:
        """The occlusion effect on the sentence embedding of each token (unit "token", the
        default: T + 1 forward passes), of each word (unit "word": its pieces masked together)
        or of each character span [start, end) of `spans`, which replace `unit` (sending both
        is Validation): units + 1 forward passes (service.engine.analytics.spans)."""
        self.check_inputs([text])
        Capability.EMBED.of(rt)
        if unit not in (None, "token", "word"):
            raise Validation(f"{FIELD} is 'token' or 'word'", field="unit")
        if spans is not None and unit is not None:
            raise Validation(f"{FIELD}: leave it out when sending spans (each span is a unit)", field="unit")
        max_rows = self.settings.max_client_batch
        if spans is not None:
            spans = check_spans(spans, len(text), max_rows - 1)
        encs = await self._encode(rt, [text], truncate)  # checked against max_len (TextTokenizer.encode)
        units = None
        if spans is not None:
            units = span_units(encs[0].offsets, spans)
        elif unit == "word":
            units = await asyncio.get_running_loop().run_in_executor(self._tok_pool, word_units, rt.tokenizer, text,
                                                                     encs[0])
            if not units.units:
                raise Validation(f"{FIELD} has no word to occlude (only whitespace, or no characters)", field="input")
        return await operations.occlusion(Capability.ANALYSE.of(rt), encs[0], max_rows, self.analytics, self.measure,
                                          self.settings.max_response_bytes, is_disconnected, units)

    async def head_importance(self, rt: Runtime, item: str | tuple[str, str], truncate: bool, raw_scores: bool,
                              is_disconnected: Callable[[], Awaitable[bool]] | None = None) -> Importance:
        """Each head's effect when removed alone (service.engine.analytics.importance): of a text on an
        embedding model's sentence embedding, or of a text or (query, document) pair on a
        cross-encoder's score. L·H + 1 forward passes through the analytics batcher."""
        self.check_inputs([item], field="input")
        if Capability.EMBED in rt.capabilities:
            if not isinstance(item, str):
                raise Validation(f"{FIELD}: a pair needs a cross-encoder; {rt.name!r} is an embedding model",
                                 field="input")
            encs = await self._encode(rt, [item], truncate, field="input")
            params: RequestParams = EmbedParams(sentence=True, normalize=True)
        else:
            Capability.EMBED.of(rt, "head importance", also=(Capability.RERANK,), field="model")
            loop = asyncio.get_running_loop()
            encs = await loop.run_in_executor(self._tok_pool, rt.tokenizer.encode_items, [item], truncate)
            rt.tokenizer.check(encs, "input")
            params = ClassifyParams(truncate=truncate, raw_scores=raw_scores)
        return await head_importance(Capability.ANALYSE.of(rt), encs[0], params, self.settings.max_client_batch,
                                     self.analytics, is_disconnected)

    async def generate(self, rt: Runtime, ask: GenerateInput) -> Generation:
        """A queued generation, its answer's bytes reserved until its response is sent."""
        self._ready()
        return await Capability.GENERATE.of(rt).generate(ask, self.responses, self._tok_pool)
