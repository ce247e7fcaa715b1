"""The HTTP ends of one request, in process, for bench.stages: a loopback TCP connection whose
server end is wrapped as `headwise serve` wraps it (server.http_protocol.CoalescingTransport),
uvicorn's own request cycle on it (what its httptools protocol builds once a request's head
and body are parsed), and the ASGI scope uvicorn would give the app."""

from __future__ import annotations

import asyncio
import email.utils
import logging

from bench.stages_calls import StageGone
from headwise.service.server.http_protocol import CoalescingTransport

HOST = "127.0.0.1"
LOG = logging.getLogger("bench.stages")


def http_scope(path: str, body: bytes) -> dict:
    """The scope uvicorn builds for a POST of `body` (JSON) to `path`."""
    return {"type": "http", "asgi": {"version": "3.0", "spec_version": "2.3"}, "http_version": "1.1",
            "server": (HOST, 8000), "client": (HOST, 50000), "scheme": "http", "method": "POST",
            "root_path": "", "path": path, "raw_path": path.encode(), "query_string": b"",
            "headers": [(b"host", b"127.0.0.1:8000"), (b"user-agent", b"bench.stages"),
                        (b"content-type", b"application/json"), (b"content-length", b"%d" % len(body))],
            "state": {}}


def body_receive(body: bytes):
    """An ASGI `receive` that hands over the whole body at once, every time it is called."""
    message = {"type": "http.request", "body": body, "more_body": False}

    async def receive() -> dict:
        return message

    return receive


class _Counted:
    """The server end's transport, counting the bytes written (so that each repetition can wait
    until the client end has read them all); everything else passes through."""

    def __init__(self, transport: asyncio.Transport):
        self._transport = transport
        self.sent = 0

    def write(self, data) -> None:
        self.sent += len(data)
        self._transport.write(data)

    def writelines(self, chunks) -> None:
        for chunk in chunks:
            self.write(chunk)

    def __getattr__(self, name: str):
        return getattr(self._transport, name)


class _Reader(asyncio.Protocol):
    """The client end: reads and counts, nothing else."""

    def __init__(self):
        self.received = 0
        self.arrived = asyncio.Event()

    def data_received(self, data: bytes) -> None:
        self.received += len(data)
        self.arrived.set()


class Loopback:
    """One TCP connection on the loopback interface, both ends in the running loop."""

    def __init__(self, server: asyncio.Server, raw: _Counted, reader: _Reader):
        self._server, self._raw, self._reader = server, raw, reader
        self.transport = CoalescingTransport(raw, asyncio.get_running_loop())

    @classmethod
    async def open(cls) -> Loopback:
        loop = asyncio.get_running_loop()
        accepted: asyncio.Future = loop.create_future()

        class Accept(asyncio.Protocol):
            def connection_made(self, transport):
                accepted.set_result(transport)

        server = await loop.create_server(Accept, HOST, 0)
        reader = _Reader()
        await loop.create_connection(lambda: reader, HOST, server.sockets[0].getsockname()[1])
        return cls(server, _Counted(await accepted), reader)

    def flush(self) -> None:
        """Send what this loop turn wrote now (headwise's transport sends at the turn's end)."""
        self.transport.flush()

    async def drained(self) -> None:
        """Until the client end has read every byte written so far."""
        while self._reader.received < self._raw.sent:
            self._reader.arrived.clear()
            await asyncio.wait_for(self._reader.arrived.wait(), 10)

    async def close(self) -> None:
        self._raw.close()
        self._server.close()
        await self._server.wait_closed()

    def cycle(self, scope: dict, body: bytes = b""):
        """uvicorn's request cycle on this connection, its request's body already in (as its
        protocol leaves it once the message is complete): `receive` and `send` for the app."""
        from uvicorn.protocols.http.flow_control import FlowControl
        from uvicorn.protocols.http.httptools_impl import RequestResponseCycle

        try:
            cycle = RequestResponseCycle(
                scope=scope, transport=self.transport, flow=FlowControl(self.transport), logger=LOG,
                access_logger=LOG, access_log=False, default_headers=DEFAULT_HEADERS,
                message_event=asyncio.Event(), expect_100_continue=False, keep_alive=True,
                on_response=lambda: None)
        except TypeError as e:
            raise StageGone(f"uvicorn's RequestResponseCycle changed ({e}): update bench/stages_http.py") from None
        cycle.body, cycle.more_body = bytearray(body), False
        cycle.message_event.set()
        return cycle


# uvicorn's: a date and its server header (config.server_header, date_header)
DEFAULT_HEADERS = [(b"date", email.utils.formatdate(usegmt=True).encode()), (b"server", b"uvicorn")]
