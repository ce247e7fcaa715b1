"""Runtime settings (README: Settings): environment variables prefixed HEADWISE_, read and
validated when the app is created, never at import time."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Literal

from pydantic import Field, SecretStr, ValidationError, field_validator, model_validator
from pydantic_settings import BaseSettings, NoDecode, SettingsConfigDict

MiB = 1 << 20
MIN_FRONTEND_STALL_S = 1.0  # HEADWISE_FRONTEND_STALL_S and _START_S, unless 0


class SettingsError(ValueError):
    """A setting with a bad value; the message names the environment variable."""


class Settings(BaseSettings):
    model_config = SettingsConfigDict(env_prefix="HEADWISE_", extra="ignore", frozen=True)

    models_dir: Path = Field(Path("models"), description="folder of model packages")
    host: str = "127.0.0.1"
    port: int = Field(8000, ge=0, le=65535)
    workers: Annotated[int, Field(ge=1, le=256)] | Literal["auto"] = Field(
        "auto", description="worker processes; auto: 1 on CPU, on CUDA as many as the host's cores and the "
        "GPU's memory allow, at most 8 (service.backends.cuda.auto_workers)")
    engine: Literal["auto", "inproc", "process"] = Field(
        "auto", description="inproc: one process does HTTP, tokenisation and the device runs (the CPU default); "
        "process: one engine process owns the sessions, fed by HEADWISE_FRONTENDS front-end processes (the "
        "CUDA default); auto: process on CUDA, inproc on CPU")
    frontends: Annotated[int, Field(ge=1, le=256)] | Literal["auto"] = Field(
        "auto", description="front-end processes in process mode; auto: usable cores − 2, at least 1")
    engine_stall_s: float = Field(
        120.0, ge=0, description="process mode: a device run that lasts longer than this means the device is "
        "stuck; the supervisor kills the engine process and exits 3 so that the server is restarted (0: never)")
    frontend_stall_s: float = Field(
        10.0, ge=0, description="process mode: a front-end whose event loop has not turned for longer than "
        "this is hung; the supervisor kills it and starts another on its socket (0: never; else at least 1)")
    frontend_start_s: float = Field(
        60.0, ge=0, description="process mode: a front-end that does not serve within this long of its start is "
        "stuck starting; the supervisor kills it and starts another on its socket (0: never; else at least 1)")
    engine_address: str | None = Field(
        None, description="set by `headwise serve` for its front-ends: the engine process's ZMQ address")
    api_key: SecretStr | None = Field(None, description="bearer token required on /v1 and /v2 routes (health probes excepted)")
    provider: Literal["auto", "cuda", "cpu"] = "auto"
    precision: Literal["auto", "fp32", "int8", "fp16"] = "auto"
    device_id: int = Field(0, ge=0, le=1023, description="CUDA device to serve on")
    gpu_mem_limit: int | None = Field(None, ge=64 * MiB, description="bytes of GPU memory onnxruntime's CUDA "
                                      "arena may hold per session; default: no limit")
    threads: int | None = Field(None, ge=1, le=1024, description="intra-op threads; default: usable cores")
    max_batch_tokens: int = Field(16384, ge=1)
    cpu_max_batch_tokens: int = Field(
        1024, ge=0, description="on CPU, batches are cut at the smaller of this and max_batch_tokens: "
        "onnxruntime's CPU kernels run fastest per token near 1k tokens a batch; 0 = max_batch_tokens only")
    max_batch_size: int = Field(64, ge=1)
    max_wait_ms: float = Field(2.0, ge=0, le=10_000)
    switch_interval_ms: float = Field(
        5.0, gt=0, le=100, description="the longest a Python thread keeps the GIL while another waits for it "
        "(sys.setswitchinterval; Python's own is 5): a batch back from onnxruntime waits up to this long for a "
        "busy event loop")
    pipeline: Literal["auto", "on", "off"] = Field(
        "auto", description="once 32 inputs wait while a batch runs, tokenise them on a thread of their own, "
        "so the next batch is ready when the device is done; auto: on CUDA only")
    max_client_batch: int = Field(256, ge=1)
    max_body_bytes: int = Field(4 * MiB, ge=1)
    max_queue: int = Field(4096, ge=1, description="queued inputs per queue before 429")
    attention_budget_bytes: int = Field(64 * MiB, ge=1)
    max_response_bytes: int = Field(128 * MiB, ge=1, description="largest response one request may ask for, "
                                    "counted as serialised (attention, token embeddings); more → 413")
    max_inflight_response_bytes: int = Field(256 * MiB, ge=1, description="responses being built or sent at "
                                             "once, counted as serialised; a request past it → 429")
    analytics_tokens_inflight: int = Field(
        131_072, ge=1, description="tokens of analytics forward passes (similarity, occlusion: rows × tokens) "
        "admitted and not yet run, for the whole process; a request past it → 429 with Retry-After")
    analytics_max_request_tokens: int = Field(
        65_536, ge=1, description="the most tokens (rows × tokens) one analytics request may cost; more → 413")
    analytics_batch_tokens: int = Field(
        1024, ge=1, description="padded tokens per analytics batch: plain work waiting goes first between two")
    analytics_threads: int = Field(
        1, ge=0, le=1024, description="on CPU, intra-op threads of the session that runs analytics rows at the "
        "lowest priority beside plain traffic; 0: analytics share the plain session and thread, between "
        "its batches")
    attention_sample: float = Field(
        0.0, ge=0, le=1, description="share of plain embedding requests that also run the attention graph after "
        "plain work, off their path, for the head-drift metrics (headwise_head_*: service.engine.analytics.drift); 0: off, "
        "and those metrics are absent")
    analysis: Literal["lazy", "eager", "off"] = Field(
        "lazy", description="the analysis graph, the one that serves attention, hidden states and removed heads: "
        "lazy: its session is made when the first request needs it (that request waits for it); eager: made "
        "and warmed at start-up, before ready; off: never, and such requests are refused")
    grace_seconds: float = Field(25.0, ge=0)
    max_input_chars: int = Field(100_000, ge=1, description="characters per input; longer → 413 before tokenisation")
    max_connections: int = Field(1000, ge=1, description="open client connections per process; one more is "
                                 "answered 503 and closed at once")
    max_head_bytes: int = Field(64 * 1024, ge=1024, description="request line and headers; more → 431, closed")
    max_headers: int = Field(100, ge=8, description="headers per request; more → 431, closed")
    head_timeout_s: float = Field(10.0, gt=0, description="to send a request's head once connected or after "
                                  "a response; slower → 408, closed")
    body_timeout_s: float = Field(60.0, gt=0, description="to send a request's body once its head is in; "
                                  "slower → 408, closed")
    docs: bool = Field(True, description="serve /docs, /redoc and /openapi.json")
    log_format: Literal["text", "json"] = Field(
        "text", description="text: uvicorn's lines, with the request's id; json: one JSON object per line (time, "
        "level, logger, message, request_id, trace_id; the access log's fields)")
    otel: bool = Field(False, description="OpenTelemetry traces: a server span per request and its queue, "
                       "tokenise, batch, device run and serialise spans, sent by OTLP/HTTP as the OTEL_* variables "
                       "say (needs headwise[otel]; docs/observability.md#traces)")
    fault_injection: bool = Field(
        False, description="TEST ONLY: inputs starting with __headwise_fault__ make the backend fail or hang")
    fault_engine_delay_ms: float = Field(
        0.0, ge=0, le=60_000, description="tests only, with HEADWISE_FAULT_INJECTION: the engine process (process "
        "mode) sleeps this long before each device run, a slow device")
    max_new_tokens: int = Field(256, ge=1, description="most tokens one /v1/generate request may ask for")
    max_prompt_tokens: int | None = Field(None, ge=1, description="longest prompt/source in tokens; "
                                          "default: each model's max_len")
    default_model: str | None = Field(None, description="the model TEI's routes (/embed, /rerank, ...) use "
                                      "when the request names none; default: the first served, in name "
                                      "order, that can answer the route")
    default_prompt_name: str | None = Field(
        None, description="the sentence-transformers prompt every embedding model prepends when a request names "
        "none (TEI's --default-prompt-name); each served embedding model must have it; default: the model's own "
        "default_prompt_name, else none")
    matryoshka_dimensions: Annotated[tuple[int, ...], NoDecode] = Field(
        (), description="comma-separated sizes the served embedding models were trained to be cut to "
        "(Matryoshka), e.g. 256,128,64: `dimensions` / `output_dimension` may ask for these; with none here or "
        "in the package (headwise export --matryoshka-dimensions), they are refused")
    served_model_names: Annotated[dict[str, str], NoDecode] = Field(
        default_factory=dict, description="extra names for served packages, as comma-separated alias=package "
        "pairs (TEI's --served-model-name, several at once): every route's `model` and /v1/models answer to them")

    @field_validator("api_key", mode="before")
    @classmethod
    def _empty_key_is_none(cls, v):
        return None if v in ("", None) else v

    @field_validator("default_model", mode="before")
    @classmethod
    def _empty_name_is_none(cls, v):
        return None if v in ("", None) else v

    @field_validator("default_prompt_name", mode="before")
    @classmethod
    def _empty_prompt_is_none(cls, v):
        return None if v in ("", None) else v

    @field_validator("frontend_stall_s", "frontend_start_s")
    @classmethod
    def _a_stall_longer_than_a_beat(cls, v):
        if 0 < v < MIN_FRONTEND_STALL_S:  # a front-end beats every 0.1 s, at best: a healthy one would be killed
            raise ValueError(f"must be 0 (never) or at least {MIN_FRONTEND_STALL_S:g} s")
        return v

    @field_validator("matryoshka_dimensions", mode="before")
    @classmethod
    def _sizes(cls, v):
        if not isinstance(v, str):
            return v
        try:
            sizes = tuple(int(x) for x in v.split(",") if x.strip())
        except ValueError:
            raise ValueError(f"{v[:40]!r} is not comma-separated whole numbers (e.g. 256,128,64)") from None
        if any(n < 1 for n in sizes):
            raise ValueError("each size must be at least 1")
        return tuple(sorted(set(sizes), reverse=True))

    @field_validator("served_model_names", mode="before")
    @classmethod
    def _alias_pairs(cls, v):
        if not isinstance(v, str):
            return v
        out: dict[str, str] = {}
        for pair in filter(None, (p.strip() for p in v.split(","))):
            alias, sep, name = (x.strip() for x in pair.partition("="))
            if not sep or not alias or not name:
                raise ValueError(f"{pair!r} is not alias=package")
            if alias in out:  # even to the same package: a duplicate is a mistake in the setting (docs/api.md)
                raise ValueError(f"alias {alias!r} is given twice")
            out[alias] = name
        return out

    @model_validator(mode="after")
    def _a_response_fits_the_inflight_budget(self):
        if self.max_response_bytes > self.max_inflight_response_bytes:
            raise ValueError(f"HEADWISE_MAX_RESPONSE_BYTES ({self.max_response_bytes}) is over "
                             f"HEADWISE_MAX_INFLIGHT_RESPONSE_BYTES ({self.max_inflight_response_bytes})")
        return self

    @model_validator(mode="after")
    def _an_analytics_request_fits_the_budget(self):
        if self.analytics_max_request_tokens > self.analytics_tokens_inflight:  # it would get 429 forever
            raise ValueError(f"HEADWISE_ANALYTICS_MAX_REQUEST_TOKENS ({self.analytics_max_request_tokens}) is over "
                             f"HEADWISE_ANALYTICS_TOKENS_INFLIGHT ({self.analytics_tokens_inflight}): a request "
                             "that large could never be admitted")
        return self

    @model_validator(mode="after")
    def _drift_needs_the_analysis_graph(self):
        if self.attention_sample and self.analysis == "off":
            raise ValueError(f"HEADWISE_ATTENTION_SAMPLE ({self.attention_sample:g}) runs the analysis graph, "
                             "which HEADWISE_ANALYSIS=off turns off: set one of them differently")
        return self

    @model_validator(mode="after")
    def _a_client_batch_fits_the_queue(self):
        if self.max_client_batch > self.max_queue:  # such a request would get 429 forever
            raise ValueError(f"HEADWISE_MAX_CLIENT_BATCH ({self.max_client_batch}) is over HEADWISE_MAX_QUEUE "
                             f"({self.max_queue}): a request that large could never be queued")
        return self


def load_settings(**overrides) -> Settings:
    """Settings from the environment (and overrides), or SettingsError naming each bad variable."""
    try:
        return Settings(**overrides)
    except ValidationError as e:
        lines = []
        for err in e.errors(include_input=False, include_url=False):
            if not err["loc"]:  # a rule across settings: its message names them
                lines.append(err["msg"].removeprefix("Value error, "))
                continue
            name = "HEADWISE_" + str(err["loc"][0]).upper()  # not the union member's tag (workers: int | auto)
            lines.append(f"{name}: {err['msg'].removeprefix('Value error, ')}")
        raise SettingsError("invalid settings: " + "; ".join(lines)) from None


def frontend_processes(settings: Settings, cores: int) -> int:
    """HEADWISE_FRONTENDS as a number: `auto` is the usable cores less two (the engine's thread,
    and ZMQ's and the driver's threads beside it), at least 1."""
    return settings.frontends if isinstance(settings.frontends, int) else max(1, cores - 2)


def worker_processes(settings: Settings) -> int:
    """HEADWISE_WORKERS as a number: `headwise serve` resolves `auto` before any worker starts
    (server.serve); an app run any other way is one process."""
    return settings.workers if isinstance(settings.workers, int) else 1
