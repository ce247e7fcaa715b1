"""The FastAPI app: `create_app(settings=None)` builds it; nothing is read at import time.

Layers: routers (HTTP) → Engine (queues, batching) → backends (onnxruntime). Errors become
responses only in service.api.errors.
"""

from __future__ import annotations

import asyncio
import logging
import signal
import threading
import time
from collections.abc import Callable
from contextlib import asynccontextmanager
from pathlib import Path

import anyio
from fastapi import FastAPI
from fastapi.encoders import jsonable_encoder
from fastapi.openapi.models import RequestBody
from fastapi.routing import APIRoute
from starlette.responses import FileResponse
from starlette.staticfiles import StaticFiles

from headwise.service import heap, tracing
from headwise.service.api import errors
from headwise.service.api.body import body_model
from headwise.service.api.compat.openapi import inline_schema
from headwise.service.api.middleware import Activity, ServiceMiddleware
from headwise.service.api.routers import (
    analytics,
    answer,
    classify,
    cohere_embed,
    cohere_rerank,
    embed,
    embed_sparse,
    fill_mask,
    generate,
    health,
    importance,
    kserve,
    metrics,
    models,
    openai,
    tag,
    tei,
    tokenize,
    vllm,
)
from headwise.service.api.sizes import JSON
from headwise.service.cpu import hand_over_gil_within
from headwise.service.engine import BackendFactory, Engine
from headwise.service.errors import NotFound
from headwise.service.metrics import Metrics
from headwise.service.package import check_aliases, check_default_model
from headwise.service.settings import Settings, load_settings

log = logging.getLogger("headwise.service")

STATIC = Path(__file__).parent.parent / "static"


SHUTDOWN_MARGIN_S = 2.0  # of the grace period, kept for closing once requests are done


DRAIN_SIGNALS = (signal.SIGTERM, signal.SIGINT, signal.SIGHUP)


def _on_sigterm(app: FastAPI) -> None:
    """SIGTERM, SIGINT (Ctrl-C) and SIGHUP alike: readiness and new requests get 503 at once;
    requests in flight finish, for at most the grace period less a margin; then uvicorn's own
    SIGTERM handler closes the listener. A second signal skips the wait (a second Ctrl-C
    makes uvicorn stop without waiting for connections)."""
    if threading.current_thread() is not threading.main_thread():
        return
    engine, grace = app.state.engine, app.state.settings.grace_seconds
    loop = asyncio.get_running_loop()
    uvicorn_exit = signal.getsignal(signal.SIGTERM)

    def previous(sig, frame) -> None:
        # uvicorn knows SIGTERM and SIGINT; SIGHUP is told as SIGTERM.
        uvicorn_exit(signal.SIGTERM if sig == signal.SIGHUP else sig, frame)

    async def drain(sig) -> None:
        # Requests still waiting for their body are not waited for: uvicorn's shutdown answers
        # them 503 (server.http_protocol), so one stalled upload cannot hold the server.
        until = time.monotonic() + max(0.0, grace - SHUTDOWN_MARGIN_S)
        activity = app.state.activity
        while activity.busy() and time.monotonic() < until:
            await asyncio.sleep(0.02)
        busy = activity.busy()
        if busy:
            log.error("grace period over with %d request(s) in flight; they get 503", busy)
            engine.abort()
            await asyncio.sleep(0.2)  # for those answers to go out
        previous(signal.SIGTERM, None)

    def handler(sig, frame):
        engine.draining = True
        engine.ready = False
        if not callable(uvicorn_exit):
            return
        if getattr(app.state, "drain_deadline", None) is not None:
            previous(sig, frame)
            return
        app.state.drain_deadline = time.monotonic() + grace
        loop.call_soon_threadsafe(lambda: setattr(app.state, "drain_task", loop.create_task(drain(sig))))

    for sig in DRAIN_SIGNALS:
        signal.signal(sig, handler)


async def _prepare(app: FastAPI) -> None:
    engine: Engine = app.state.engine
    try:
        await anyio.to_thread.run_sync(engine.prepare)
    except Exception as e:
        engine.failed = f"{type(e).__name__}: {e}"
        log.error("model start-up failed: %s", engine.failed)
        if app.state.on_fatal is not None:  # `headwise serve` stops and exits non-zero
            app.state.on_fatal()
        return
    if not engine.draining:
        engine.start()
        if app.state.settle_heap:
            heap.settle()
        log.info("ready: %s", ", ".join(engine.models))


@asynccontextmanager
async def lifespan(app: FastAPI):
    engine: Engine = app.state.engine
    hand_over_gil_within(app.state.settings.switch_interval_ms)  # process-wide: the server owns it
    await anyio.to_thread.run_sync(engine.load_packages)  # bad package → start-up fails
    check_default_model(app.state.settings.default_model, engine.models)
    check_aliases(app.state.settings.served_model_names, engine.models)
    _on_sigterm(app)
    if app.state.ready_before_serving:
        # Process mode: the kernel gives each front-end's socket its share of new connections
        # from the start (supervisor._listen); one still preparing would answer 503 to a client
        # another front-end has already told "ready". Accept only once prepared: until then its
        # share waits in its queue.
        await _prepare(app)
        task = None
    else:
        task = asyncio.get_running_loop().create_task(_prepare(app))
    try:
        yield
    finally:
        engine.draining = True
        engine.ready = False
        if task is not None and not task.done():
            task.cancel()
        # Requests in flight are done (or the grace period is): what is left of it, at most 5 s.
        deadline = getattr(app.state, "drain_deadline", None)
        left = deadline - time.monotonic() - 0.5 if deadline else app.state.settings.grace_seconds
        await engine.close(timeout=max(0.2, min(5.0, left)))
        app.state.metrics.close()
        tracing.shutdown()  # what is left of the spans goes out


def api_routes(routes):
    """Every APIRoute, as declared (FastAPI keeps an included router whole, as `original_router`)."""
    for route in routes:
        if isinstance(route, APIRoute):
            yield route
        elif (inner := getattr(route, "original_router", None)) is not None:
            yield from api_routes(inner.routes)


def _document_bodies(app: FastAPI) -> None:
    """Request bodies parsed by body.json_body (`body: Json[Model]`) are invisible to FastAPI;
    document each from the route's own declaration: the native API's as a reference to the
    model's schema in components, a compatible protocol's inlined (its models' names, TEI's
    EmbedRequest, would clash with ours)."""
    base = app.openapi

    def openapi() -> dict:
        if app.openapi_schema:
            return app.openapi_schema
        schema = base()
        components = schema.setdefault("components", {}).setdefault("schemas", {})
        named: dict[str, type] = {}
        for route in api_routes(app.router.routes):
            model = next((m for d in route.dependant.dependencies if (m := body_model(d.call))), None)
            if model is None or not route.include_in_schema:
                continue
            if getattr(route, "protocol", errors.NATIVE) is errors.NATIVE:
                name = model.__name__
                if named.setdefault(name, model) is not model:
                    raise TypeError(f"two request bodies named {name} ({route.path}): rename one")
                s = model.model_json_schema(ref_template="#/components/schemas/{model}")
                components.update(s.pop("$defs", {}))
                components[name] = s
                body = {"$ref": f"#/components/schemas/{name}"}
            else:
                body = inline_schema(model)
            # as FastAPI writes what it documents itself (its OpenAPI models: no nulls)
            request_body = jsonable_encoder(RequestBody(required=True, content={"application/json": {"schema": body}}),
                                            by_alias=True, exclude_none=True)
            for method in route.methods:
                schema["paths"][route.path_format][method.lower()]["requestBody"] = request_body
        return schema

    app.openapi = openapi


def create_app(settings: Settings | None = None, *, backend_factory: BackendFactory | None = None,
               on_fatal: Callable[[], None] | None = None, ready_before_serving: bool = False,
               settle_heap: bool = False) -> FastAPI:
    """Build the app. Settings default to the HEADWISE_* environment, validated now.
    `on_fatal` is called when the models cannot be prepared (sessions, warm-up): `headwise
    serve` passes one that stops the server, which then exits non-zero; without it the app
    stays up, live but never ready, and `/health/ready` says why. By default the app answers
    (live, not ready) while it prepares; with `ready_before_serving` its start-up waits until
    it is prepared, so it accepts no connection before (process mode's front-ends). `settle_heap`:
    once prepared, freeze what start-up built out of the collector's way (service.heap; for a
    server process, not for an app a test builds and drops)."""
    settings = settings if settings is not None else load_settings()
    tracing.setup(settings.otel, "front-end" if settings.engine_address else "server")
    m = Metrics()
    app = FastAPI(
        title="headwise",
        version="0.1.0",
        summary="Transformer embeddings over HTTP, with every attention head on request.",
        lifespan=lifespan,
        docs_url="/docs" if settings.docs else None,
        redoc_url="/redoc" if settings.docs else None,
        openapi_url="/openapi.json" if settings.docs else None,
        # Off: its per-request "is an SDK configured?" check is a visible share of the event
        # loop's work under load (bench/results/experiments-cpu.md), and HEADWISE_OTEL's spans
        # are headwise's own (service.tracing), on the fast path too.
        telemetry={"tracing": False, "metrics": False, "logs": False},
        # A path with a trailing slash is not a route: 404, as any unknown path. Starlette's
        # redirect would answer 307 to a Location built from the client's Host header.
        redirect_slashes=False,
    )
    app.state.settings = settings
    app.state.on_fatal = on_fatal
    app.state.ready_before_serving = ready_before_serving
    app.state.settle_heap = settle_heap
    app.state.activity = Activity()
    app.state.metrics = m
    app.state.engine = Engine(settings, m, backend_factory, measure=JSON)
    errors.install(app)
    routers = [r.router for r in (embed, tokenize, analytics, importance, models, health, metrics, generate, classify, tag,
                                  answer, fill_mask, embed_sparse, openai, kserve, tei, cohere_rerank, cohere_embed, vllm)] + [tei.probes]
    for router in routers:
        app.include_router(router)
    app.state.shortcuts = {}  # filled by server.fastpath under `headwise serve`
    app.add_middleware(ServiceMiddleware, metrics=m, max_body_bytes=settings.max_body_bytes,
                       activity=app.state.activity, shortcuts=app.state.shortcuts,
                       routes=[route for router in routers for route in router.routes])

    @app.get("/", include_in_schema=False)
    async def index():
        page = STATIC / "index.html"
        if not page.is_file():
            raise NotFound("no viewer page installed")
        return FileResponse(page)

    _document_bodies(app)
    if STATIC.is_dir():
        app.mount("/static", StaticFiles(directory=STATIC), name="static")
    return app
