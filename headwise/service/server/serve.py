"""`headwise serve`: serve model packages with uvicorn (uvloop + httptools).

Flags override HEADWISE_* variables; they are written back to the environment so that
worker processes (--workers N) build the same settings.
"""

from __future__ import annotations

import argparse
import copy
import logging
import os
import shutil
import signal
import sys
import tempfile
import threading
import time

from headwise.service import tracing
from headwise.service.backends import cuda
from headwise.service.backends.onnxruntime import check_precision
from headwise.service.cpu import usable_cores
from headwise.service.engine.heads import check_package
from headwise.service.logs import JsonFormatter, RequestContext, say, text_formatter
from headwise.service.package import PackageError, check_aliases, check_default_model, find_packages
from headwise.service.server import versions
from headwise.service.settings import SettingsError, load_settings

PLAIN_FACTORY = "headwise.service.server.serve:worker_app"  # uvicorn's factory string without the fast path
FLAGS = {"models": "HEADWISE_MODELS_DIR", "host": "HEADWISE_HOST", "port": "HEADWISE_PORT",
         "workers": "HEADWISE_WORKERS"}


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--models", metavar="DIR", help="folder of model packages (default: models/)")
    parser.add_argument("--host", help="address to bind (default 127.0.0.1)")
    parser.add_argument("--port", type=int, help="port (default 8000)")
    parser.add_argument("--workers", type=_workers, help="worker processes, or auto (the default: 1 on CPU, "
                        "several on CUDA)")
    parser.add_argument("--log-level", default="info", choices=["critical", "error", "warning", "info", "debug"])
    parser.add_argument("--access-log", action="store_true", help="log every request (costs throughput)")


def _workers(value: str) -> int | str:
    return value if value == "auto" else int(value)


def serves_on_cuda(settings) -> bool:
    """Whether the server will run on CUDA: HEADWISE_PROVIDER=cuda, or auto where CUDA can be used."""
    return settings.provider == "cuda" or (settings.provider == "auto" and cuda.probe(settings.device_id).ok)


def resolve_workers(settings):
    """`auto` → a number (service.backends.cuda.auto_workers on CUDA, else 1), exported as
    HEADWISE_WORKERS for the worker processes; a number stays as it is."""
    if isinstance(settings.workers, int):
        return settings
    on_cuda = serves_on_cuda(settings)
    n = cuda.auto_workers(usable_cores(), cuda.device_memory(settings.device_id)) if on_cuda else 1
    os.environ["HEADWISE_WORKERS"] = str(n)
    if on_cuda:
        say(f"HEADWISE_WORKERS=auto: {n} worker processes share the GPU", logging.INFO)
    return settings.model_copy(update={"workers": n})


def log_config(level: str, fmt: str = "text") -> dict:
    """uvicorn's `log_config` for a server process: its loggers and headwise's, in `fmt`
    (service.logs: the request's id on every line; JSON lines)."""
    from uvicorn.config import LOGGING_CONFIG

    cfg = copy.deepcopy(LOGGING_CONFIG)
    cfg["loggers"]["headwise"] = {"handlers": ["default"], "level": level.upper(), "propagate": False}
    cfg["filters"] = {"request": {"()": RequestContext}}
    for handler in cfg["handlers"].values():
        handler["filters"] = ["request"]
    if fmt == "json":
        cfg["formatters"] = {name: {"()": JsonFormatter} for name in cfg["formatters"]}
    else:
        for name, spec in cfg["formatters"].items():
            rest = {k: v for k, v in spec.items() if k != "()"}
            cfg["formatters"][name] = {"()": text_formatter, "inner": spec["()"], **rest}
    return cfg


def _exit_if_stuck(code: int, wait_s: float = 1.0) -> None:
    """A request hanging in onnxruntime past the grace period leaves a non-daemon worker
    thread that the interpreter would wait for at exit; it must not keep the process alive."""
    deadline = time.monotonic() + wait_s
    for t in threading.enumerate():
        if t is not threading.main_thread() and not t.daemon:
            t.join(max(0.0, deadline - time.monotonic()))
    stuck = [t.name for t in threading.enumerate() if t is not threading.main_thread() and t.is_alive()
             and not t.daemon]
    if stuck:
        say(f"exiting with thread(s) still busy: {', '.join(stuck)}", logging.WARNING)
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(code)


def uvicorn_options(settings, log_level: str, access_log: bool) -> tuple[dict, bool]:
    """uvicorn's options for a server process (in-process or a front-end), and whether the fast
    path can be installed (server.versions)."""
    # proxy_headers (X-Forwarded-For): only the access log reads a client's address
    options = dict(host=settings.host, port=settings.port, loop="uvloop", proxy_headers=access_log,
                   # the app's SIGTERM drain waits for requests in flight (service.api.app); this is
                   # only what uvicorn waits after it, or on SIGINT
                   lifespan="on", timeout_graceful_shutdown=min(settings.grace_seconds, 1.0),
                   log_level=log_level, access_log=access_log, log_config=log_config(log_level, settings.log_format))
    fast = not (wrong := versions.mismatches())
    if fast:
        from headwise.service.server import http_protocol

        options["http"] = http_protocol.protocol(settings)
    else:
        say(versions.fallback_warning(wrong), logging.WARNING)
        options["http"] = "httptools"
    return options, fast


def resolve_engine(settings) -> str:
    """HEADWISE_ENGINE as `inproc` or `process`: `auto` is process on CUDA (unless
    HEADWISE_WORKERS names a number of whole-server workers), inproc on CPU. Contradictory
    settings raise SettingsError, naming them."""
    workers_set = isinstance(settings.workers, int)
    if settings.engine == "process" and workers_set and settings.workers > 1:
        raise SettingsError(f"HEADWISE_ENGINE=process and HEADWISE_WORKERS={settings.workers} contradict each "
                            "other: process mode runs one engine and HEADWISE_FRONTENDS front-end processes; unset "
                            "HEADWISE_WORKERS, or set HEADWISE_ENGINE=inproc for whole-server workers")
    if settings.engine != "auto":
        return settings.engine
    if workers_set:
        return "inproc"
    return "process" if serves_on_cuda(settings) else "inproc"


def main(args: argparse.Namespace) -> int:
    for flag, env in FLAGS.items():
        value = getattr(args, flag, None)
        if value is not None:
            os.environ[env] = str(value)
    try:
        settings = load_settings()
        # Checked here too (hashes included) so a bad package stops us with a clear message
        # before any worker starts; the app's start-up repeats it from a cache.
        packages = find_packages(settings.models_dir)
        for package in packages:
            check_package(package)  # a task no head serves, a labelled head's package without labels
        check_precision(packages, settings.precision, settings.provider)
        check_default_model(settings.default_model, [p.name for p in packages])
        check_aliases(settings.served_model_names, [p.name for p in packages])
        if settings.provider == "cuda":  # fail in seconds, naming what is missing
            found = cuda.probe(settings.device_id)
            if not found.ok:
                raise PackageError(f"HEADWISE_PROVIDER=cuda, but CUDA cannot be used here: {found.why()}")
        tracing.check(settings.otel)
        mode = resolve_engine(settings)
        if mode == "inproc":
            settings = resolve_workers(settings)
    except (SettingsError, PackageError, tracing.TracingError) as e:
        say(f"error: {e}")
        return 2
    if mode == "process":
        from headwise.service.server import supervisor

        return supervisor.run(settings, args.log_level, args.access_log)

    made_dir = None
    if settings.workers > 1 and not os.environ.get("PROMETHEUS_MULTIPROC_DIR"):
        made_dir = tempfile.mkdtemp(prefix="headwise-metrics-")
        os.environ["PROMETHEUS_MULTIPROC_DIR"] = made_dir  # before prometheus_client is imported

    import uvicorn

    signals = ExitSignals()
    options, fast = uvicorn_options(settings, args.log_level, args.access_log)
    try:
        if settings.workers == 1:
            from headwise.service.api.app import create_app

            def stop() -> None:
                server.should_exit = True

            app = create_app(settings, on_fatal=stop, settle_heap=True)
            served = app
            if fast:
                from headwise.service.server import fastpath

                served = fastpath.Entry(fastpath.install(app))
            server = uvicorn.Server(uvicorn.Config(served, **options))
            signals.run(server)
            code = 3 if (not server.started and not signals.got) or app.state.engine.failed else 0
            _exit_if_stuck(code)
            return code
        factory = PLAIN_FACTORY
        if fast:
            from headwise.service.server import fastpath

            factory = fastpath.FACTORY
        # uvicorn's process manager installs its handlers only once it has bound the socket:
        # until then a signal takes its default action (no worker is started yet)
        signal.signal(signal.SIGTERM, signal.SIG_DFL)
        signal.signal(signal.SIGINT, signal.default_int_handler)
        if not signals.got:
            uvicorn.run(factory, factory=True, workers=settings.workers, **options)
        return 0
    finally:
        if made_dir:
            shutil.rmtree(made_dir, ignore_errors=True)


def worker_app():
    """uvicorn's factory for `headwise serve --workers N` without the fast path: each worker is
    a server process and settles its heap once ready (service.heap), as a single server does."""
    from headwise.service.api.app import create_app

    return create_app(settle_heap=True)


class ExitSignals:
    """SIGTERM and SIGINT until uvicorn installs its own handlers (while the app is made, which
    under load takes seconds), and after it restores these. One that comes early is kept and
    keeps the server from starting (`run`), where a no-op would have lost it and left the
    process serving. After uvicorn has drained it re-raises SIGTERM (or a second SIGINT): here that is
    an exit 0, with no KeyboardInterrupt traceback."""

    def __init__(self) -> None:
        self.got = False
        self._server = None
        signal.signal(signal.SIGTERM, self._handle)
        signal.signal(signal.SIGINT, self._handle)

    def _handle(self, *_) -> None:
        self.got = True
        if self._server is not None:
            self._server.should_exit = True

    def run(self, server, sockets=None) -> None:
        """Run `server` (a uvicorn.Server), unless a signal came first: then nothing is started
        (server.started stays False). One in the moment before uvicorn's handlers are in place
        stops it once started, its shutdown answering what it took in."""
        self._server = server
        if not self.got:
            server.run() if sockets is None else server.run(sockets=sockets)
