"""The fast path `headwise serve` adds to the app: the hot routes answered past FastAPI's
routing and dependency solving, and uvicorn's own view of a request (server.http_protocol).

The app `headwise.service.api.app.create_app` builds is plain FastAPI: every route is an ordinary
endpoint with its dependencies declared through `Depends`, and that is what tests and any
other ASGI server run. `install(app)` makes the same endpoints cheaper to reach: for a route
in HOT whose dependencies are plain `async def f(request)` callables, ServiceMiddleware calls
them and the endpoint itself (FastAPI's routing and dependency solving are a large share of a
small request's server CPU, measured with bench/overhead.py). Exceptions go to the handlers
FastAPI would use (service.api.errors.handle); `scope["route"]` is set as routing would. A hot
request also enters the app at ServiceMiddleware (`HotFirst`), past the layers Starlette and
FastAPI put outside every user middleware, which have nothing to do for it.

This module and server.http_protocol are the only ones that rely on the internals of
FastAPI (`APIRoute.dependant`), Starlette (`scope["route"]`, `middleware_stack`) and uvicorn; only server.serve
imports them (import-linter), and only at the versions server.versions names;
tests/unit/service/server/test_fastpath.py checks that both paths answer alike.
"""

from __future__ import annotations

import inspect

from fastapi import FastAPI
from fastapi.routing import APIRoute
from starlette.requests import Request
from starlette.responses import Response

from headwise.service.api import errors
from headwise.service.api.app import api_routes
from headwise.service.api.app import create_app as create_plain_app
from headwise.service.api.middleware import ServiceMiddleware
from headwise.service.server.http_protocol import body_pending, uvicorn_disconnect_probe

FACTORY = "headwise.service.server.fastpath:create_app"  # uvicorn's factory string (workers > 1)
HOT = frozenset({("POST", "/v1/embed"), ("POST", "/v1/embeddings"), ("POST", "/embed")})  # the routes under load


def _simple_calls(route: APIRoute):
    """(request parameter name, [(name, async callable taking the request)]) when the route
    needs nothing but the request and such dependencies; None otherwise."""
    d = route.dependant
    if d.path_params or d.query_params or d.header_params or d.cookie_params or d.body_params:
        return None
    calls = []
    for sub in d.dependencies:
        plain = not (sub.dependencies or sub.path_params or sub.query_params or sub.header_params
                     or sub.cookie_params or sub.body_params)
        if not plain or sub.request_param_name is None or not _is_async(sub.call):
            return None
        calls.append((sub.name, sub.request_param_name, sub.call))
    return d.request_param_name, calls


def _is_async(fn) -> bool:
    return inspect.iscoroutinefunction(fn)


def direct_routes(app: FastAPI) -> dict:
    """(method, path) → an ASGI callable answering that route's requests directly."""
    out = {}
    for route in api_routes(app.router.routes):
        for method in route.methods:
            if (method, route.path) in HOT and (plan := _simple_calls(route)) is not None:
                out[(method, route.path)] = _direct(route, *plan)
    return out


def _direct(route: APIRoute, request_name: str | None, calls: list):
    endpoint = route.dependant.call

    async def answer(scope, receive, send) -> None:
        scope["route"] = route  # for the metrics' label and the error shape, as routing would
        request = Request(scope, receive)
        try:
            kwargs = {request_name: request} if request_name else {}
            for name, arg, call in calls:
                value = await call(**{arg: request})
                if name is not None:
                    kwargs[name] = value
            response = await endpoint(**kwargs)
            if not isinstance(response, Response):  # hot endpoints answer a Response themselves
                raise TypeError(f"{route.path}: a direct route must return a Response")
        except Exception as exc:  # what FastAPI's exception handlers would answer
            response = await errors.handle(request, exc)
        await response(scope, receive, send)

    return answer


class HotFirst:
    """The app's middleware stack, with a hot route's request handed straight to
    ServiceMiddleware. The layers it skips are those FastAPI builds outside every user
    middleware: Starlette's ServerErrorMiddleware (ServiceMiddleware already answers any
    exception in the route's protocol, and the server a 500 for one of its own), FastAPI's
    exception telemetry (off: the spans are headwise's, service.tracing) and its body limit (a
    pass-through: no route sets one; HEADWISE_MAX_BODY_BYTES is ServiceMiddleware's). Not a
    coroutine of its own: it returns the awaitable of the layer that answers. One difference:
    an exception ServiceMiddleware itself lets out (a failing error handler) is answered by the
    server's plain 500, not by the app's 500 handler in the route's shape."""

    def __init__(self, stack, service: ServiceMiddleware, hot):
        self.stack, self.service, self.hot = stack, service, hot

    def __call__(self, scope, receive, send):
        if scope["type"] == "http" and (scope["method"], scope["path"]) in self.hot:
            return self.service(scope, receive, send)
        return self.stack(scope, receive, send)


class Entry:
    """The app as uvicorn calls it under `headwise serve`: an HTTP request goes
    straight into the app's middleware stack (HotFirst), with what FastAPI's and Starlette's
    `__call__` would have set on its way (`root_path`, `scope["app"]`); FastAPI's own telemetry,
    the one other thing its `__call__` does, is off in every app create_app makes. Lifespan
    events go to the app itself."""

    def __init__(self, app: FastAPI):
        if app.middleware_stack is None:  # the one Starlette would build later, lifespan's too
            raise ValueError("Entry(app) takes an app the fast path is installed on (install(app))")
        self.app, self.stack, self.root_path = app, app.middleware_stack, app.root_path

    async def __call__(self, scope, receive, send) -> None:
        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        if self.root_path:
            scope["root_path"] = self.root_path
        scope["app"] = self.app
        await self.stack(scope, receive, send)


def install(app: FastAPI) -> FastAPI:
    """Answer the hot routes directly, and read disconnects and pending bodies from uvicorn.
    Builds the app's middleware stack now (Starlette would at its first request)."""
    app.state.shortcuts.update(direct_routes(app))
    app.state.disconnect_probe = uvicorn_disconnect_probe
    app.state.activity.body_pending = body_pending
    stack = app.build_middleware_stack()
    service = stack
    while not isinstance(service, ServiceMiddleware):
        service = service.app
    app.middleware_stack = HotFirst(stack, service, app.state.shortcuts)
    return app


def create_app() -> Entry:
    """uvicorn's factory for `headwise serve --workers N`: the app, with the fast path; each
    worker is a server process and settles its heap once ready, as a single server does."""
    return Entry(install(create_plain_app(settle_heap=True)))
