"""The engine process of process mode (docs/architecture.md#process-mode), started by the
supervisor as `python -m headwise.service.server.engine_process`: it loads every package's
sessions and warms them with the in-process start-up (`Engine.prepare`, the same code as
`inproc`), then serves them to the front-ends through `EngineCore` until SIGTERM, when it
finishes the runs it accepted and exits 0. A start-up that fails exits 3, saying why, and so does
an engine whose serving thread failed (a bug: it logs the traceback)."""

from __future__ import annotations

import logging
import os
import signal
import sys
import threading
import time

from headwise.service import heap, tracing
from headwise.service.api.sizes import JSON
from headwise.service.backends.core import EngineCore
from headwise.service.backends.onnxruntime import metric_variant
from headwise.service.engine import Engine
from headwise.service.logs import configure
from headwise.service.metrics import Metrics
from headwise.service.settings import SettingsError, load_settings

log = logging.getLogger("headwise.service")


class SlowDevice:
    """Tests only (HEADWISE_FAULT_INJECTION with HEADWISE_FAULT_ENGINE_DELAY_MS): a backend whose
    every run first sleeps, so that runs queue in the engine and requests stay in flight."""

    def __init__(self, backend, delay_s: float):
        self.backend, self.delay_s = backend, delay_s
        self.provider, self.precision, self.variants = backend.provider, backend.precision, backend.variants

    def run(self, role, feeds, outputs):
        time.sleep(self.delay_s)
        return self.backend.run(role, feeds, outputs)


def serve() -> int:
    settings = load_settings()
    if not settings.engine_address:
        print("headwise engine: HEADWISE_ENGINE_ADDRESS is not set; `headwise serve` starts this process",
              file=sys.stderr)
        return 2
    stop = threading.Event()
    for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
        signal.signal(sig, lambda *_: stop.set())
    metrics = Metrics()
    engine = Engine(settings, metrics, measure=JSON)  # it loads and warms: the front-ends measure answers
    t0 = time.perf_counter()
    try:
        engine.load_packages()
        engine.prepare()
    except Exception as e:
        log.error("engine: model start-up failed: %s: %s", type(e).__name__, e)
        return 3
    models = engine.models.values()
    backends = {rt.name: rt.backend for rt in models}
    if settings.fault_injection and settings.fault_engine_delay_ms:
        backends = {name: SlowDevice(b, settings.fault_engine_delay_ms / 1000) for name, b in backends.items()}
    batch_tokens = min((rt.max_batch_tokens for rt in models), default=settings.max_batch_tokens)

    def on_run(model: str, role: str, runs: int, rows: int, seconds: float) -> None:
        variant = metric_variant(backends[model].variants, role)
        metrics.engine_stacked.labels(model=model, variant=variant).observe(runs)
        metrics.engine_busy.labels(model=model, variant=variant).inc(seconds)

    def on_drop(model: str, rows: int) -> None:
        metrics.engine_dropped.labels(model=model).inc(rows)

    crashed: list[BaseException] = []

    def on_exit(crash: BaseException | None) -> None:
        if crash is not None:  # the engine's thread is gone: nothing would answer the front-ends
            crashed.append(crash)
            stop.set()

    core = EngineCore(backends, settings.engine_address, max_batch_size=settings.max_batch_size,
                      max_batch_tokens=batch_tokens, on_run=on_run, on_drop=on_drop, on_exit=on_exit)
    try:
        tracing.setup(settings.otel, "engine")  # the device runs' spans are written here
        core.start(os.getpid())
    except Exception as e:
        log.error("engine: cannot listen at %s: %s", settings.engine_address, e)
        return 3
    heap.settle()
    log.info("engine: serving %s at %s (loaded and warmed in %.1fs)", ", ".join(backends), settings.engine_address,
             time.perf_counter() - t0)
    stop.wait()
    if crashed:
        metrics.close()
        return 3  # the supervisor sees the engine gone: 503 from every front-end, then exit 3
    log.info("engine: stopping; finishing the runs accepted")
    core.stop(timeout=max(1.0, settings.grace_seconds))
    metrics.close()
    tracing.shutdown()
    return 0


def main() -> None:
    try:
        fmt = load_settings().log_format
    except SettingsError:
        fmt = "text"  # serve() says why, and exits
    configure("info", fmt, "%(levelname)s:     [engine %(process)d] %(message)s")
    sys.exit(serve())


if __name__ == "__main__":
    main()
