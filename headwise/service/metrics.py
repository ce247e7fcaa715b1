"""Prometheus metrics (prefix headwise_; docs/metrics.md lists them).

One `Metrics` per app, on its own registry. With several workers the CLI sets
PROMETHEUS_MULTIPROC_DIR before prometheus_client is imported; values then live in files
that `render()` merges, written a few at a time (service.metric_values).
"""

from __future__ import annotations

import os

from prometheus_client import (
    CONTENT_TYPE_LATEST,
    GC_COLLECTOR,
    PLATFORM_COLLECTOR,
    PROCESS_COLLECTOR,
    CollectorRegistry,
    Counter,
    Gauge,
    Histogram,
    generate_latest,
    values,
)

from headwise.service import metric_values
from headwise.service.gpu_metrics import GpuCollector, gpu_collector

LATENCY = (0.001, 0.002, 0.005, 0.01, 0.02, 0.05, 0.1, 0.2, 0.5, 1.0, 2.0, 5.0, 10.0)
FAST = (0.0001, 0.0005, 0.001, 0.002, 0.005, 0.01, 0.02, 0.05, 0.1, 0.5, 1.0)
COUNTS = (1, 2, 4, 8, 16, 32, 64, 128, 256)
TOKENS = (8, 16, 32, 64, 128, 256, 512, 1024, 2048, 4096, 8192, 16384, 32768)
UNIT = tuple(round(0.05 * i, 2) for i in range(1, 21))  # 0.05, 0.1, ..., 1: shares, normalised entropies


def multiprocess_dir() -> str | None:
    return os.environ.get("PROMETHEUS_MULTIPROC_DIR")


class _Pid:
    """This process's id, read again after a fork only. prometheus-client's multiprocess
    values ask for it at every change, to notice a fork (a getpid system call each, a dozen a
    request in a front-end); `values.MultiProcessValue` takes the function it asks instead."""

    value = os.getpid()

    @classmethod
    def get(cls) -> int:
        return cls.value

    @classmethod
    def forked(cls) -> None:
        cls.value = os.getpid()


os.register_at_fork(after_in_child=_Pid.forked)
if multiprocess_dir():  # the CLI sets it before this module is imported (module docstring)
    values.ValueClass = metric_values.deferred(values.MultiProcessValue(_Pid.get))


class Metrics:
    content_type = CONTENT_TYPE_LATEST

    def __init__(self, gpu: GpuCollector | bool | None = True) -> None:
        """`gpu`: True reads NVML when it answers here (service.gpu_metrics); a collector, or
        None for none."""
        r = self.registry = CollectorRegistry(auto_describe=True)
        p = "headwise_"
        self.requests = Counter(p + "requests_total", "HTTP requests", ["route", "model", "code"], registry=r)
        self.request_duration = Histogram(p + "request_duration_seconds", "HTTP request latency",
                                          ["route", "model"], buckets=LATENCY, registry=r)
        self.request_failures = Counter(p + "request_failures_total", "failed requests by reason",
                                        ["model", "reason"], registry=r)
        self.queue_duration = Histogram(p + "queue_duration_seconds", "time from enqueue to batch start",
                                        ["model", "variant", "priority"],
                                        buckets=(*FAST, 2.0, 5.0, 10.0, 30.0, 60.0), registry=r)
        self.tokenize_duration = Histogram(p + "tokenize_duration_seconds",
                                           "time per batch encode (the requests waiting, tokenised together)",
                                           ["model"], buckets=FAST, registry=r)
        self.inference_duration = Histogram(p + "inference_duration_seconds", "onnxruntime run time per batch",
                                            ["model", "variant"], buckets=LATENCY, registry=r)
        self.batch_size = Histogram(p + "batch_size", "inputs per inference batch", ["model", "variant"],
                                    buckets=COUNTS, registry=r)
        self.batch_tokens = Histogram(p + "batch_tokens", "padded tokens per inference batch",
                                      ["model", "variant"], buckets=TOKENS, registry=r)
        self.input_tokens = Histogram(p + "input_tokens", "tokens per input", ["model"],
                                      buckets=TOKENS[:7], registry=r)
        self.queue_depth = Gauge(p + "queue_depth", "inputs waiting in a queue", ["model", "variant", "priority"],
                                 multiprocess_mode="livesum", registry=r)
        self.inflight = Gauge(p + "inflight_requests", "HTTP requests being served",
                              multiprocess_mode="livesum", registry=r)
        self.response_bytes = Gauge(p + "response_bytes_inflight",
                                    "bytes of answers being built or sent, counted as serialised (the "
                                    "HEADWISE_MAX_INFLIGHT_RESPONSE_BYTES budget)", multiprocess_mode="livesum",
                                    registry=r)
        self.attention_bytes = Counter(p + "attention_bytes_total", "attention bytes returned", ["model"],
                                       registry=r)
        self.attention_aggregates = Counter(p + "attention_aggregate_requests_total",
                                            "embed requests whose attention was aggregated (mean, rollout)",
                                            ["model", "aggregate"], registry=r)
        self.analytics = Counter(p + "analytics_requests_total", "similarity and occlusion requests answered",
                                 ["model", "analytic"], registry=r)
        self.analytics_tokens = Gauge(p + "analytics_tokens_inflight",
                                      "tokens of analytics rows admitted and not yet run (the "
                                      "HEADWISE_ANALYTICS_TOKENS_INFLIGHT budget)", multiprocess_mode="livesum",
                                      registry=r)
        self.model_info = Gauge(p + "model_info", "served model (value 1)",
                                ["model", "version", "provider", "precision"], multiprocess_mode="max",
                                registry=r)
        self.generated_tokens = Counter(p + "generated_tokens_total", "tokens generated (rate: tokens/s)",
                                        ["model"], registry=r)
        self.time_to_first_token = Histogram(p + "time_to_first_token_seconds",
                                             "from a generate request's admission to its first token",
                                             ["model"], buckets=LATENCY, registry=r)
        self.inter_token_latency = Histogram(p + "inter_token_latency_seconds",
                                             "time between two tokens of one generation", ["model"],
                                             buckets=(*FAST, 2.0, 5.0), registry=r)
        # Process mode (HEADWISE_ENGINE=process): recorded by the engine process, which writes to
        # the multiprocess folder beside its front-ends.
        self.engine_stacked = Histogram(p + "engine_stacked_runs", "front-end batches run as one device run by the "
                                        "engine process", ["model", "variant"], buckets=COUNTS, registry=r)
        self.engine_busy = Counter(p + "engine_busy_seconds_total", "seconds of device runs in the engine process "
                                   "(its rate is the share of time the device was kept busy)", ["model", "variant"],
                                   registry=r)
        self.engine_dropped = Counter(p + "engine_dropped_rows_total", "rows taken out of runs waiting in the engine "
                                      "process because their clients had gone", ["model"], registry=r)
        # Head drift (enable_head_drift): registered only when HEADWISE_ATTENTION_SAMPLE > 0.
        self.head_entropy: Histogram | None = None
        self.head_special_share: Histogram | None = None
        self.head_samples: Counter | None = None
        # process_* (memory, CPU) and python_* for the dashboard's process panels.
        for collector in (PROCESS_COLLECTOR, PLATFORM_COLLECTOR, GC_COLLECTOR):
            r.register(collector)
        self.gpu = gpu_collector() if gpu is True else gpu or None
        if self.gpu is not None:
            r.register(self.gpu)

    def enable_head_drift(self) -> None:
        """Register the head-drift metrics (service.engine.analytics.drift), once: with sampling off they
        are absent from the scrape rather than empty. Labels `layer` and `head` are indices, so
        a model has L·H series of each histogram."""
        if self.head_samples is not None:
            return
        r, p, labels = self.registry, "headwise_", ["model", "layer", "head"]
        self.head_entropy = Histogram(p + "head_attention_entropy",
                                      "a sampled input's mean attention entropy per head, over ln T (0..1)",
                                      labels, buckets=UNIT, registry=r)
        self.head_special_share = Histogram(p + "head_special_share",
                                            "a sampled input's mean attention share on its special tokens per head",
                                            labels, buckets=UNIT, registry=r)
        self.head_samples = Counter(p + "head_samples_total", "plain embed requests sampled for head drift",
                                    ["model", "outcome"], registry=r)

    def render(self) -> bytes:
        if multiprocess_dir():
            from prometheus_client import multiprocess

            metric_values.flush()  # this process's last changes; the others' are at most FLUSH_S old
            registry = CollectorRegistry()
            multiprocess.MultiProcessCollector(registry)
            registry.register(PROCESS_COLLECTOR)  # the worker that answers this scrape
            if self.gpu is not None:
                registry.register(self.gpu)
            return generate_latest(registry)
        return generate_latest(self.registry)

    def close(self) -> None:
        if multiprocess_dir():
            from prometheus_client import multiprocess

            metric_values.flush()
            multiprocess.mark_process_dead(os.getpid())


class ModelSeries:
    """One model's metric children, looked up once: prometheus-client's `labels()` takes a lock
    and builds a tuple per call, and the inference thread would call it for every batch."""

    def __init__(self, metrics: Metrics, model: str):
        self._metrics, self._model = metrics, model
        self.tokenize = metrics.tokenize_duration.labels(model=model)
        self.input_tokens = metrics.input_tokens.labels(model=model)
        self.attention_bytes = metrics.attention_bytes.labels(model=model)
        self._batches: dict[str, tuple] = {}

    def aggregate(self, how: str):
        """headwise_attention_aggregate_requests_total{aggregate=how} of this model."""
        return self._metrics.attention_aggregates.labels(model=self._model, aggregate=how)

    def analytic(self, what: str):
        """headwise_analytics_requests_total{analytic=what} of this model."""
        return self._metrics.analytics.labels(model=self._model, analytic=what)

    def batch(self, variant: str) -> tuple:
        """(inference_duration, batch_size, batch_tokens) of this variant."""
        got = self._batches.get(variant)
        if got is None:
            m, labels = self._metrics, {"model": self._model, "variant": variant}
            got = self._batches[variant] = (m.inference_duration.labels(**labels),
                                            m.batch_size.labels(**labels), m.batch_tokens.labels(**labels))
        return got


class QueueHooks:
    """What a Batcher reports, bound to its (model, variant, priority) labels. `priority`:
    "plain" (embed, rerank, predict and every compatible route) or "analytics"."""

    def __init__(self, metrics: Metrics, model: str, variant: str, priority: str = "plain"):
        labels = {"model": model, "variant": variant, "priority": priority}
        self._depth = metrics.queue_depth.labels(**labels)
        self._wait = metrics.queue_duration.labels(**labels)
        self._dropped = metrics.request_failures.labels(model=model, reason="disconnected")
        self.depth = 0
        # The depth changes a few times a request. In one process the scrape reads it (a
        # gauge's function); several processes' values meet only in their files, so there
        # each change is set (and written with the others, service.metric_values).
        self._written = bool(multiprocess_dir())
        if not self._written:
            self._depth.set_function(lambda: self.depth)

    def on_depth(self, n: int) -> None:
        self.depth = n
        if self._written:
            self._depth.set(n)

    def on_queue_wait(self, seconds: float) -> None:
        self._wait.observe(seconds)

    def on_dropped(self, job) -> None:
        self._dropped.inc()
