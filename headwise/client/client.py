"""Client (blocking) and AsyncClient (asyncio), on httpx. Each method is an operation of
headwise/client/calls.py, whose signature and docstring it takes: the request is built and the
answer parsed by the same pure functions in both clients; only sending differs."""

from __future__ import annotations

import functools
import inspect
from collections.abc import AsyncIterator, Callable, Coroutine, Iterator, Mapping
from typing import Any, Concatenate, ParamSpec, TypeVar

import httpx

from headwise.client import calls
from headwise.client.calls import Call, StreamCall
from headwise.client.parse import read_answer
from headwise.client.types import GenerateResult, GenerateToken

P = ParamSpec("P")
T = TypeVar("T")
Event = GenerateToken | GenerateResult

DEFAULT_URL = "http://127.0.0.1:8000"
# Generous reads: an occlusion or an attention answer of a long input can take a while.
DEFAULT_TIMEOUT = httpx.Timeout(300.0, connect=10.0)


def _like(method: Callable[..., Any], build: Callable[..., Any]) -> None:
    """`method` presents `build`'s name, docstring and signature, with `self` first and the
    parsed result (not the Call) as its return annotation."""
    functools.update_wrapper(method, build)
    sig = inspect.signature(build)
    ret = sig.return_annotation
    if isinstance(ret, str) and ret.startswith("Call[") and ret.endswith("]"):
        ret = ret[len("Call["):-1]
    elif isinstance(ret, str) and ret == "StreamCall":
        ret = "Iterator[GenerateToken | GenerateResult]"
    self_param = inspect.Parameter("self", inspect.Parameter.POSITIONAL_ONLY)
    method.__signature__ = sig.replace(  # type: ignore[attr-defined]
        parameters=[self_param, *sig.parameters.values()], return_annotation=ret)


def _headers(api_key: str | None, headers: Mapping[str, str] | None) -> dict[str, str]:
    out = {"User-Agent": "headwise-client", **(headers or {})}
    if api_key:
        out["Authorization"] = f"Bearer {api_key}"
    return out


def _sync(build: Callable[P, Call[T]]) -> Callable[Concatenate[Client, P], T]:
    def method(self: Client, /, *args: P.args, **kwargs: P.kwargs) -> T:
        return self._run(build(*args, **kwargs))

    _like(method, build)
    return method


def _sync_stream(build: Callable[P, StreamCall]) -> Callable[Concatenate[Client, P], Iterator[Event]]:
    def method(self: Client, /, *args: P.args, **kwargs: P.kwargs) -> Iterator[Event]:
        return self._stream(build(*args, **kwargs))

    _like(method, build)
    return method


def _async(build: Callable[P, Call[T]]) -> Callable[Concatenate[AsyncClient, P], Coroutine[Any, Any, T]]:
    async def method(self: AsyncClient, /, *args: P.args, **kwargs: P.kwargs) -> T:
        return await self._run(build(*args, **kwargs))

    _like(method, build)
    return method


def _async_stream(build: Callable[P, StreamCall]) -> Callable[Concatenate[AsyncClient, P], AsyncIterator[Event]]:
    def method(self: AsyncClient, /, *args: P.args, **kwargs: P.kwargs) -> AsyncIterator[Event]:
        return self._stream(build(*args, **kwargs))

    _like(method, build)
    method.__signature__ = method.__signature__.replace(  # type: ignore[attr-defined]
        return_annotation="AsyncIterator[GenerateToken | GenerateResult]")
    return method


class Client:
    """A blocking client of a headwise server.

    `Client(base_url, api_key=None, timeout=...)`: `api_key` is sent as a bearer token
    (`HEADWISE_API_KEY`); `timeout` is httpx's (seconds, or an httpx.Timeout). Nothing is
    retried unless `retries` > 0 (connection failures only: httpx's transport retries).
    `transport` replaces httpx's (tests: httpx.MockTransport). Errors answered by the server
    raise HeadwiseError; a connection that fails raises httpx's TransportError. Use it as a
    context manager, or call close()."""

    def __init__(self, base_url: str = DEFAULT_URL, api_key: str | None = None,
                 timeout: float | httpx.Timeout | None = DEFAULT_TIMEOUT, *, headers: Mapping[str, str] | None = None,
                 retries: int = 0, transport: httpx.BaseTransport | None = None) -> None:
        if transport is None and retries:
            transport = httpx.HTTPTransport(retries=retries)
        self.http = httpx.Client(base_url=base_url, timeout=timeout, headers=_headers(api_key, headers),
                                 transport=transport)

    embed = _sync(calls.embed)
    tokenize = _sync(calls.tokenize)
    similarity = _sync(calls.similarity)
    occlusion = _sync(calls.occlusion)
    rerank = _sync(calls.rerank)
    predict = _sync(calls.predict)
    tag = _sync(calls.tag)
    answer = _sync(calls.answer)
    fill_mask = _sync(calls.fill_mask)
    embed_sparse = _sync(calls.embed_sparse)
    generate = _sync(calls.generate)
    generate_stream = _sync_stream(calls.generate_stream)
    head_importance = _sync(calls.head_importance)
    models = _sync(calls.models)
    model_info = _sync(calls.model_info)

    def _run(self, call: Call[T]) -> T:
        r = self.http.request(call.method, call.path, json=call.body)
        return call.parse(read_answer(r.status_code, r.content, r.headers))

    def _stream(self, call: StreamCall) -> Iterator[Event]:
        decoder = call.decoder()
        with self.http.stream("POST", call.path, json=call.body) as r:
            if not 200 <= r.status_code < 300:
                read_answer(r.status_code, r.read(), r.headers)
            for line in r.iter_lines():
                if (ev := decoder.feed(line)) is not None:
                    yield ev
                if decoder.done:
                    return
        if (ev := decoder.close()) is not None:
            yield ev

    def close(self) -> None:
        self.http.close()

    def __enter__(self) -> Client:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class AsyncClient:
    """The asyncio client: Client's methods and arguments, each a coroutine
    (`generate_stream` an async iterator). Use `async with`, or `await aclose()`."""

    def __init__(self, base_url: str = DEFAULT_URL, api_key: str | None = None,
                 timeout: float | httpx.Timeout | None = DEFAULT_TIMEOUT, *, headers: Mapping[str, str] | None = None,
                 retries: int = 0, transport: httpx.AsyncBaseTransport | None = None) -> None:
        if transport is None and retries:
            transport = httpx.AsyncHTTPTransport(retries=retries)
        self.http = httpx.AsyncClient(base_url=base_url, timeout=timeout, headers=_headers(api_key, headers),
                                      transport=transport)

    embed = _async(calls.embed)
    tokenize = _async(calls.tokenize)
    similarity = _async(calls.similarity)
    occlusion = _async(calls.occlusion)
    rerank = _async(calls.rerank)
    predict = _async(calls.predict)
    tag = _async(calls.tag)
    answer = _async(calls.answer)
    fill_mask = _async(calls.fill_mask)
    embed_sparse = _async(calls.embed_sparse)
    generate = _async(calls.generate)
    generate_stream = _async_stream(calls.generate_stream)
    head_importance = _async(calls.head_importance)
    models = _async(calls.models)
    model_info = _async(calls.model_info)

    async def _run(self, call: Call[T]) -> T:
        r = await self.http.request(call.method, call.path, json=call.body)
        return call.parse(read_answer(r.status_code, r.content, r.headers))

    async def _stream(self, call: StreamCall) -> AsyncIterator[Event]:
        decoder = call.decoder()
        async with self.http.stream("POST", call.path, json=call.body) as r:
            if not 200 <= r.status_code < 300:
                read_answer(r.status_code, await r.aread(), r.headers)
            async for line in r.aiter_lines():
                if (ev := decoder.feed(line)) is not None:
                    yield ev
                if decoder.done:
                    return
        if (ev := decoder.close()) is not None:
            yield ev

    async def aclose(self) -> None:
        await self.http.aclose()

    async def __aenter__(self) -> AsyncClient:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()
