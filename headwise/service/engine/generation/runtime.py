"""A served generative model (architecture "decoder" or "encoder-decoder"): its tokenizer,
graphs, scheduler and the checks a generation request passes before it is queued. It is a
service.engine.runtime.Runtime, as an encoder model is."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from concurrent.futures import Executor
from dataclasses import dataclass

import numpy as np
from tokenizers import Tokenizer

from headwise.service import tracing
from headwise.service.engine.budget import Reservation, ResponseBudget
from headwise.service.engine.faults import FAULT
from headwise.service.engine.generation.batch import Stepper
from headwise.service.engine.generation.hidden import hidden_blocks
from headwise.service.engine.generation.sampling import SamplingParams
from headwise.service.engine.generation.scheduler import Scheduler
from headwise.service.engine.generation.sequence import GenerateInput, GenParams, Sequence
from headwise.service.engine.internals import HiddenSpec
from headwise.service.engine.params import AttentionSpec
from headwise.service.engine.runtime import Capability, base_card
from headwise.service.engine.size import Measure, Size
from headwise.service.engine.stats import ModelStats
from headwise.service.engine.tokenizer import TextTokenizer
from headwise.service.errors import (
    InvalidRequest,
    NotReady,
    TooLarge,
    Validation,
)
from headwise.service.metrics import Metrics
from headwise.service.package import ModelPackage
from headwise.service.settings import Settings

DEFAULT_NEW_TOKENS = 16
BackendFactory = Callable[[ModelPackage, Settings], object]


@dataclass(frozen=True)
class Prompt:
    """A request's text, tokenised and checked: its ids and tokens, and the most new tokens it
    may have (max_new_tokens within the model's max_len)."""

    ids: np.ndarray
    tokens: list[str]
    limit: int


@dataclass(frozen=True)
class Generation:
    """A queued generation: its sequence (events, result) and the bytes held for its answer
    until the response has been sent."""

    seq: Sequence
    reservation: Reservation


class GenerativeRuntime:
    capabilities = frozenset({Capability.GENERATE})
    use = "it generates text with POST /v1/generate"
    def __init__(self, package: ModelPackage, settings: Settings, metrics: Metrics, measure: Measure):
        m = package.manifest
        self.package = package
        self.settings = settings
        self.metrics = metrics
        self.measure = measure  # what an answer takes as written (service.api.sizes.JSON)
        self.tokenizer = TextTokenizer(package.tokenizer_file, package.max_len)  # /v1/tokenize
        self.decoder = Tokenizer.from_file(str(package.tokenizer_file))
        self.decoder.no_padding()
        self.decoder.no_truncation()
        self.special = dict(m["special_tokens"])
        self.suppress_ids = tuple(int(i) for i in (m.get("generation") or {}).get("suppress_token_ids", ()))
        self.d_head = int(m.get("d_head") or package.d_model // package.n_heads)
        self.backend = None  # a GenerativeBackend, or what the engine's backend factory makes
        self.scheduler: Scheduler | None = None
        self.stats = ModelStats()  # Triton's statistics cover batched encoder inference; none here yet
        self.ready = False

    @property
    def name(self) -> str:
        return self.package.name

    @property
    def source_field(self) -> str:
        return "prompt" if self.package.architecture == "decoder" else "source"

    @property
    def max_prompt_tokens(self) -> int:
        return min(self.settings.max_prompt_tokens or self.package.max_len, self.package.max_len)

    @property
    def described(self) -> str:
        return f"a {self.package.architecture} model"

    @property
    def max_batch_tokens(self) -> int:
        return self.settings.max_batch_tokens

    def card(self) -> dict:
        p, b = self.package, self.backend
        return {**base_card(p, b, self.ready, lambda name: b is not None), "task": "generation",
                "n_encoder_layers": int(p.manifest.get("n_encoder_layers") or 0), "pooling": None, "normalize": False,
                "attention": all(g + ".attention" in p.variants for g in self._graphs()),
                "generate": {"input": self.source_field, "special_tokens": self.special,
                             "suppress_token_ids": list(self.suppress_ids),
                             "max_new_tokens": self.settings.max_new_tokens,
                             "max_prompt_tokens": self.max_prompt_tokens}}

    def _graphs(self) -> tuple[str, str]:
        return ("prefill", "decode") if self.package.architecture == "decoder" else ("encoder", "decoder_step")

    def attention_spec(self, layers, heads, **how) -> AttentionSpec:
        if not all(g + ".attention" in self.package.variants for g in self._graphs()):
            raise Validation(f"model {self.name!r} has no attention graphs")
        return AttentionSpec.select(self.package.n_layers, self.package.n_heads, layers, heads, **how)

    def _step_graphs(self) -> tuple[str, ...]:
        """The graphs whose `.attention` form outputs the fed tokens' hidden states."""
        return ("prefill", "decode") if self.package.architecture == "decoder" else ("decoder_step",)

    def has_hidden_states(self) -> bool:
        """Whether every step graph's `.attention` form outputs `hidden_states` (packages
        exported before it was added do not)."""
        v = self.package.variants
        return all(g + ".attention" in v and "hidden_states" in v[g + ".attention"].outputs for g in self._step_graphs())

    def hidden_spec(self, layers, **how) -> HiddenSpec:
        """The decoder's layers 0..n_layers; Validation for an index out of range, or for a
        package whose step graphs do not output hidden states."""
        if not self.has_hidden_states():
            raise Validation(f"hidden_states: model {self.name!r} has step graphs without the hidden_states "
                             "output (packages exported before it was added): export it again",
                             field="hidden_states")
        return HiddenSpec.select(self.package.n_layers, layers, **how)

    async def generate(self, ask: GenerateInput, budget: ResponseBudget,
                       pool: Executor | None = None) -> Generation:
        """Check and tokenise the request, reserve its answer's bytes, queue it. The prompt is
        tokenised and checked on `pool` (the engine's tokenizer pool), never on the event loop;
        its Sequence (future, event queue) is made back on the loop."""
        field, other = self.source_field, ("source" if self.source_field == "prompt" else "prompt")
        if getattr(ask, other) is not None:
            raise Validation(f"model {self.name!r} is a {self.package.architecture} model: send the text in "
                             f"'{field}', not '{other}'")
        text = getattr(ask, field)
        if text is None:
            raise Validation(f"{field}: field required")
        cap = self.settings.max_input_chars
        if cap and len(text) > cap:
            raise TooLarge(f"{field} has {len(text)} characters, over HEADWISE_MAX_INPUT_CHARS ({cap})")
        if self.scheduler is None:
            raise NotReady("model not loaded or warming up")
        params = self._params(ask)
        t0 = time.perf_counter()
        prompt = await asyncio.get_running_loop().run_in_executor(pool, self.prompt, text, params)
        self.metrics.tokenize_duration.labels(model=self.name).observe(time.perf_counter() - t0)
        seq = self.sequence(text, params, prompt)
        seq.trace = tracing.current()
        with budget.reserve(self.measure.bytes(self.answer_size(seq))) as reservation:
            self.scheduler.submit(seq)
        return Generation(seq, reservation)

    def _params(self, ask: GenerateInput) -> GenParams:
        limit = self.settings.max_new_tokens
        new = ask.max_new_tokens if ask.max_new_tokens is not None else min(DEFAULT_NEW_TOKENS, limit)
        if new > limit:
            raise Validation(f"max_new_tokens: at most {limit} (HEADWISE_MAX_NEW_TOKENS)")
        if len(ask.stop) > 16 or any(not s or len(s) > 256 for s in ask.stop):
            raise Validation("stop: at most 16 strings, each 1 to 256 characters")
        return GenParams(new, ask.sampling, ask.seed, ask.stop, ask.stream, ask.attention, ask.hidden)

    def abort(self, exc: Exception) -> None:
        if self.scheduler is not None:
            self.scheduler.abort(exc)

    async def close(self, timeout: float) -> None:
        if self.scheduler is not None:
            await self.scheduler.close(timeout)

    # -- start-up ---------------------------------------------------------------------------
    def load(self, factory: BackendFactory) -> None:
        """Sessions for every graph."""
        self.backend = factory(self.package, self.settings)
        self.metrics.model_info.labels(model=self.name, version=self.package.version,
                                       provider=self.backend.provider, precision=self.backend.precision).set(1)

    def _stepper(self) -> Stepper:
        inference = self.metrics.inference_duration
        batch_size = self.metrics.batch_size

        def on_run(variant, seconds, rows, tokens):
            inference.labels(model=self.name, variant=variant).observe(seconds)
            batch_size.labels(model=self.name, variant=variant).observe(rows)

        return Stepper(self.backend, self.package.architecture, (self.package.n_layers, self.package.n_heads,
                                                                  self.d_head), self.special, on_run)

    def warm_up(self) -> None:
        """Two tokens through every graph, plain and with attention and hidden states (no metrics)."""
        stepper = Stepper(self.backend, self.package.architecture,
                          (self.package.n_layers, self.package.n_heads, self.d_head), self.special)
        ids = np.asarray(self.decoder.encode("warm up").ids[: self.package.max_len - 2] or [0], np.int64)

        for attention in (False, True):
            sel = AttentionSpec((0,), (0,), False, False) if attention else None
            hidden = HiddenSpec((0,)) if attention and self.has_hidden_states() else None
            params = GenParams(2, SamplingParams(), 0, (), False, sel, hidden)
            seq = Sequence(model=self.name, source_field=self.source_field, prompt_ids=ids, prompt_tokens=[],
                           params=params, limit=2, tokenizer=self.decoder, eos=None,
                           suppress_ids=self.suppress_ids, metrics=_Quiet())
            batch, _ = stepper.admit([seq])
            if batch is not None:
                stepper.step(batch)

    def start(self) -> None:
        self.scheduler = Scheduler(self._stepper(), self.name, self.settings.max_batch_size, self.settings.max_queue)
        self.scheduler.start()

    # -- requests -----------------------------------------------------------------------------
    def prompt(self, text: str, params: GenParams) -> Prompt:
        """Tokenise and check a request's text (the tokenizer pool's thread: `generate`). Raises
        4xx errors."""
        limit = self.max_prompt_tokens
        enc = self.tokenizer.encode_unchecked([text], truncate=False)[0]
        n = enc.length
        if n == 0:
            raise InvalidRequest(f"'{self.source_field}' is empty (no tokens)")
        if n > limit:
            raise Validation(f"{self.source_field} has {n} tokens or more, over the limit of {limit} "
                             "(HEADWISE_MAX_PROMPT_TOKENS, and the model's max_len)")
        room = self.package.max_len - (n if self.package.architecture == "decoder" else 1)
        if room < 1:
            raise Validation(f"{self.source_field} leaves no room to generate within max_len {self.package.max_len}")
        new = min(params.max_new_tokens, room)
        sel = params.attention
        if sel is not None:
            need = sel.values_bytes(self._attention_cells(n, new))
            if need > self.settings.attention_budget_bytes:
                raise TooLarge(f"asked-for attention is up to {need} bytes, over the budget of "
                               f"{self.settings.attention_budget_bytes}; ask for fewer layers, heads or tokens")
        if sel is not None or params.hidden is not None:
            self.measure.check(self._internals_size(params, n, new), self.settings.max_response_bytes,
                               "ask for fewer layers, heads or tokens, pooled hidden states, or base64")
        return Prompt(enc.ids, list(enc.tokens), new)

    def sequence(self, text: str, params: GenParams, prompt: Prompt) -> Sequence:
        """The queued request (event loop: its result future and event queue are the loop's)."""
        return Sequence(model=self.name, source_field=self.source_field, prompt_ids=prompt.ids,
                        prompt_tokens=prompt.tokens, params=params, limit=prompt.limit, tokenizer=self.decoder,
                        eos=self.special.get("eos"), suppress_ids=self.suppress_ids, metrics=self.metrics,
                        t_submit=time.perf_counter(), step_delay=self._fault_delay(text))

    def _attention_cells(self, n: int, new: int) -> int:
        """Attention weights (per layer and head) a generation of `new` tokens after `n` prompt
        or source tokens returns: the prompt's self-attention and each step's row, plus each
        step's cross-attention row for encoder-decoders."""
        decoder = self.package.architecture == "decoder"
        ctx = n if decoder else 1
        cells = (n * n if decoder else 0) + sum(ctx + i for i in range(new))
        return cells if decoder else cells + new * n

    def _internals_size(self, params: GenParams, n: int, new: int) -> Size:
        """What the asked-for attention and hidden states of `new` steps after `n` prompt or
        source tokens write in the answer."""
        sel, hid = params.attention, params.hidden
        blocks = (sel.cells_block(self._attention_cells(n, new)),) if sel is not None else ()
        prompt = n if self.package.architecture == "decoder" else 0  # a source has no decoder states
        if hid is not None:
            blocks += hidden_blocks(hid, prompt, new, self.package.d_model)
        return Size(blocks=blocks)

    def answer_size(self, seq: Sequence) -> Size:
        """What the result holds at most (the process-wide response budget counts it): its
        attention and hidden states, each token's text and id, and the answer's own keys."""
        n = len(seq.prompt_ids)
        return self._internals_size(seq.params, n, seq.limit) + Size(records=n + seq.limit + 64)

    def _fault_delay(self, text: str) -> float:
        """Tests only (HEADWISE_FAULT_INJECTION=true): a text starting `__headwise_fault__:slow=S `
        sleeps S seconds after each step of its batch, so disconnects and batching can be seen."""
        if not getattr(self.settings, "fault_injection", False) or not text.startswith(FAULT + "slow="):
            return 0.0
        try:
            return min(1.0, max(0.0, float(text[len(FAULT) + 5:].split()[0])))
        except (ValueError, IndexError):
            return 0.0

class _Quiet:
    """Metrics that record nothing (warm-up)."""

    def __getattr__(self, name):
        return self

    def labels(self, **kw):
        return self

    def observe(self, v):
        pass

    def inc(self, v=1):
        pass
