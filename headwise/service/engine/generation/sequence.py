"""One generation request: its prompt (or source), options, random generator, the tokens
chosen so far, when to stop, and what the client receives (token events and the result).

`advance` runs on the scheduler's inference thread; `deliver` on the event loop."""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass, field

import numpy as np

from headwise.service import tracing
from headwise.service.engine.generation.hidden import step_states
from headwise.service.engine.generation.sampling import SamplingParams, make_rng, pick, suppress
from headwise.service.engine.internals import HiddenSpec
from headwise.service.engine.outputs import step_attention
from headwise.service.engine.params import AttentionSpec


@dataclass(frozen=True)
class GenerateInput:
    """A generation request as the client sent it, checked by GenerativeRuntime.generate."""

    prompt: str | None = None  # decoder models
    source: str | None = None  # encoder-decoder models
    max_new_tokens: int | None = None  # None: the default (16, or the server's limit if lower)
    sampling: SamplingParams = field(default_factory=SamplingParams)
    seed: int | None = None
    stop: tuple[str, ...] = ()
    stream: bool = False
    attention: AttentionSpec | None = None  # from the runtime's attention_spec
    hidden: HiddenSpec | None = None  # from the runtime's hidden_spec


@dataclass
class GenParams:
    max_new_tokens: int
    sampling: SamplingParams
    seed: int | None
    stop: tuple[str, ...]
    stream: bool
    attention: AttentionSpec | None
    hidden: HiddenSpec | None = None


@dataclass(eq=False)
class Sequence:
    """State of one request. `prompt_ids` is the prompt (decoder) or the source (encoder-decoder)."""

    model: str
    source_field: str  # "prompt" | "source"
    prompt_ids: np.ndarray
    prompt_tokens: list[str]
    params: GenParams
    limit: int  # most new tokens: max_new_tokens, capped by the model's max_len
    tokenizer: object  # tokenizers.Tokenizer
    eos: int | None
    suppress_ids: tuple[int, ...]
    metrics: object
    ids: list[int] = field(default_factory=list)
    steps: list[dict] = field(default_factory=list)
    prompt_attention: dict | None = None
    hidden_steps: list[dict] = field(default_factory=list)
    prompt_hidden: dict | None = None
    finish_reason: str | None = None
    cancelled: bool = False
    text: str = ""
    t_submit: float = field(default_factory=time.perf_counter)
    t_last: float | None = None
    step_delay: float = 0.0  # HEADWISE_FAULT_INJECTION tests only: seconds slept per step
    trace: object = None  # the request's span context when tracing (service.tracing)

    def __post_init__(self):
        self.rng = make_rng(self.params.seed)
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:  # warm-up, on a thread: nobody waits for the result
            loop = None
        self.result: asyncio.Future | None = loop.create_future() if loop else None
        self.events: asyncio.Queue | None = asyncio.Queue() if loop and self.params.stream else None
        self._decoded = ""

    @property
    def finished(self) -> bool:
        return self.finish_reason is not None or self.cancelled

    @property
    def wants_attention(self) -> bool:
        return self.params.attention is not None

    @property
    def wants_hidden(self) -> bool:
        return self.params.hidden is not None

    # -- inference thread -----------------------------------------------------------------
    def choose(self, logits: np.ndarray) -> int:
        return pick(suppress(logits, self.suppress_ids), self.params.sampling, self.rng)

    def advance(self, token: int, self_att: np.ndarray | None, cross_att: np.ndarray | None,
                hidden: np.ndarray | None = None) -> list:
        """Take the chosen token (and this step's attention rows [L, H, 1, T], and hidden states
        [L + 1, D] at the position whose logits chose it); returns the events to deliver: the
        token event, and the result when this was the last one."""
        now = time.perf_counter()
        labels = self.metrics
        if self.t_last is None:
            labels.time_to_first_token.labels(model=self.model).observe(now - self.t_submit)
        else:
            labels.inter_token_latency.labels(model=self.model).observe(now - self.t_last)
        labels.generated_tokens.labels(model=self.model).inc()
        self.t_last = now
        index = len(self.ids)
        self.ids.append(token)
        step = {}
        sel = self.params.attention
        if sel is not None:
            if self_att is not None:
                step["self_attention"] = step_attention(self_att, sel)
            if cross_att is not None:
                step["cross_attention"] = step_attention(cross_att, sel)
            self.steps.append(step)
        states = None
        if self.params.hidden is not None and hidden is not None:
            states = step_states(hidden, self.params.hidden)
            self.hidden_steps.append(states)
        self._update_text(token)
        if token == self.eos:
            self.finish_reason = "eos"
        elif self.finish_reason is None and len(self.ids) >= self.limit:
            self.finish_reason = "length"
        delta = self._delta(self.finish_reason is not None)
        event = {"index": index, "token": self.tokenizer.id_to_token(token), "id": token, "text": delta}
        if step:
            event["attention"] = step
        if states is not None:
            event["hidden_states"] = states
        out = [event] if self.params.stream else []
        if self.finish_reason is not None:
            out.append(self.final())
            if self.trace is not None:  # one span per generation, not one per token
                tracing.record("generate", self.trace, self.t_submit, time.perf_counter(), **{
                    "headwise.generation.steps": len(self.ids), "headwise.generation.finish_reason": self.finish_reason})
        return out

    def _update_text(self, token: int) -> None:
        """`text`: everything generated, decoded (eos left out); a stop string found ends the
        sequence and is cut from it, with whatever follows."""
        if token == self.eos:
            return
        full = self.tokenizer.decode([i for i in self.ids if i != self.eos], skip_special_tokens=True)
        hits = [full.find(s) for s in self.params.stop if s in full]
        if hits:
            self.finish_reason = "stop"
            full = full[:min(hits)]
        self.text = full

    def _delta(self, last: bool) -> str:
        """What `text` grew by since the last event; held back while it ends in a partial
        UTF-8 character (byte-level tokens), unless this is the last token."""
        if self.text.endswith("\ufffd") and not last:
            return ""
        delta = self.text[len(self._decoded):] if self.text.startswith(self._decoded) else ""
        self._decoded = self.text
        return delta

    def final(self) -> dict:
        out = {"model": self.model, "text": self.text,
               "tokens": [self.tokenizer.id_to_token(i) for i in self.ids], "ids": list(self.ids),
               "finish_reason": self.finish_reason,
               "usage": {"prompt_tokens": len(self.prompt_ids), "completion_tokens": len(self.ids),
                         "total_tokens": len(self.prompt_ids) + len(self.ids)},
               self.source_field: {"tokens": self.prompt_tokens, "ids": self.prompt_ids.tolist()}}
        sel = self.params.attention
        if sel is not None:
            att = {"layers": list(sel.layers), "heads": list(sel.heads), "dtype": sel.dtype,
                   "encoding": sel.encoding}
            if self.prompt_attention is not None:
                att["prompt"] = self.prompt_attention
            att["steps"] = self.steps
            out["attention"] = att
        hid = self.params.hidden
        if hid is not None:
            states = {"layers": list(hid.layers), "pooling": hid.pooling, "dtype": hid.dtype,
                      "encoding": hid.encoding}
            if self.prompt_hidden is not None:
                states["prompt"] = self.prompt_hidden
            states["steps"] = self.hidden_steps
            out["hidden_states"] = states
        return out

    # -- event loop -------------------------------------------------------------------------
    def deliver(self, events: list) -> None:
        for ev in events:
            if self.events is not None:
                self.events.put_nowait(ev)
            if "finish_reason" in ev and not self.result.done():
                self.result.set_result(ev)
                if self.events is not None:
                    self.events.put_nowait(None)  # the end of the stream

    def fail(self, exc: BaseException) -> None:
        self.cancelled = True
        if not self.result.done():
            self.result.set_exception(exc)
            self.result.exception()  # retrieved: no "never retrieved" warning when nobody waits
        if self.events is not None:
            self.events.put_nowait(exc)

    def cancel(self) -> None:
        self.cancelled = True
