"""uvicorn's httptools protocol, with a response's writes sent together.

uvicorn writes a response's head on `http.response.start` and its body on
`http.response.body`: two `send` syscalls and, with TCP_NODELAY, two packets the client wakes
for. Writes made in one turn of the event loop are joined here and leave as one at the end of
that turn. Measured with `python -m bench.overhead`: see bench/results/experiments-cpu.md.
"""

from __future__ import annotations

import asyncio

from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol

UVICORN_HTTP = "service.http_protocol:HttpProtocol"  # uvicorn's `http` option (a string: workers > 1 too)


class CoalescingTransport:
    """A transport whose writes in one loop turn are sent as one; everything else passes through."""

    __slots__ = ("_held", "_loop", "_transport")

    def __init__(self, transport: asyncio.Transport, loop: asyncio.AbstractEventLoop):
        self._transport = transport
        self._loop = loop
        self._held: list[bytes] = []

    def write(self, data: bytes) -> None:
        if not self._held:
            self._loop.call_soon(self.flush)
        self._held.append(data)

    def writelines(self, chunks) -> None:
        for chunk in chunks:
            self.write(chunk)

    def flush(self) -> None:
        held, self._held = self._held, []
        if held and not self._transport.is_closing():
            self._transport.write(held[0] if len(held) == 1 else b"".join(held))

    def write_eof(self) -> None:
        self.flush()
        self._transport.write_eof()

    def close(self) -> None:
        self.flush()
        self._transport.close()

    def __getattr__(self, name: str):
        return getattr(self._transport, name)


class HttpProtocol(HttpToolsProtocol):
    """`uvicorn.Config(http=HttpProtocol)`: httptools, with CoalescingTransport."""

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        super().connection_made(CoalescingTransport(transport, self.loop))
