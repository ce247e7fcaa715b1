"""CoalescingTransport: a response's head and body leave in one write."""

import asyncio
from types import SimpleNamespace

from headwise.service.server.http_protocol import CoalescingTransport


class FakeTransport:
    def __init__(self):
        self.writes, self.closed = [], False

    def write(self, data):
        self.writes.append(data)

    def is_closing(self):
        return self.closed

    def close(self):
        self.closed = True

    def get_extra_info(self, name, default=None):
        return {"peername": ("127.0.0.1", 1)}.get(name, default)


def test_writes_in_one_loop_turn_leave_as_one():
    async def main():
        real = FakeTransport()
        t = CoalescingTransport(real, asyncio.get_running_loop())
        t.write(b"HTTP/1.1 200 OK\r\n\r\n")
        t.write(b"{}")
        assert real.writes == []  # held until the turn ends
        await asyncio.sleep(0)
        first = list(real.writes)
        t.write(b"next")
        await asyncio.sleep(0)
        return real, first

    real, first = asyncio.run(main())
    assert first == [b"HTTP/1.1 200 OK\r\n\r\n{}"]
    assert real.writes == [first[0], b"next"]


def test_close_sends_what_is_held_first_and_the_rest_passes_through():
    async def main():
        real = FakeTransport()
        t = CoalescingTransport(real, asyncio.get_running_loop())
        t.write(b"bye")
        t.close()
        await asyncio.sleep(0)  # the scheduled flush finds nothing left
        return real, t

    real, t = asyncio.run(main())
    assert real.writes == [b"bye"] and real.closed and t.is_closing()
    assert t.get_extra_info("peername") == ("127.0.0.1", 1)


def test_the_uvicorn_internals_relied_on_are_the_ones_written_for():
    """headwise/service/server/http_protocol.py overrides uvicorn's httptools protocol and reads its private
    state. Written for these versions: a new one must be read against it before this moves."""
    from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol, RequestResponseCycle

    from headwise.service.server.versions import WRITTEN_FOR, installed

    assert all(installed()[k] == WRITTEN_FOR[k] for k in ("uvicorn", "httptools")), installed()
    for name in ("_unset_keepalive_if_required", "_should_upgrade", "handle_websocket_upgrade",
                 "_unsupported_upgrade_warning", "shutdown", "on_message_begin",
                 "on_url", "on_header", "on_headers_complete", "on_message_complete", "connection_lost",
                 "_start_asgi_task", "on_response_complete", "timeout_keep_alive_handler"):
        assert callable(getattr(HttpToolsProtocol, name)), name
    for field in ("timeout_keep_alive", "pipeline", "server_state", "flow"):  # on_response_complete's
        assert field in HttpToolsProtocol.__init__.__code__.co_names, field
    cycle_fields = RequestResponseCycle.__init__.__code__.co_names
    assert "connections" in HttpToolsProtocol.__init__.__code__.co_names
    for field in ("more_body", "disconnected", "response_complete", "message_event", "response_started",
                  "waiting_for_100_continue", "chunked_encoding", "expected_content_length", "keep_alive",
                  "default_headers", "access_log", "flow"):  # Cycle.send's too
        assert field in cycle_fields, field


def test_a_refusal_is_a_complete_json_response_that_closes():
    import json

    from headwise.service.server.http_protocol import refusal

    raw = refusal(431, "request head over 65536 bytes")
    head, body = raw.split(b"\r\n\r\n", 1)
    assert head.startswith(b"HTTP/1.1 431 Request Header Fields Too Large\r\n")
    assert b"connection: close" in head and b"content-length: %d" % len(body) in head
    rid = next(line.split(b": ")[1].decode() for line in head.split(b"\r\n") if line.startswith(b"x-request-id"))
    assert len(rid) == 32 and rid != json.loads(refusal(431, "again").split(b"\r\n\r\n")[1])["error"]["request_id"]
    assert json.loads(body) == {"error": {"message": "request head over 65536 bytes",
                                          "type": "request_header_fields_too_large", "code": 431, "request_id": rid}}


def _cycle(cls, method: str = "POST", keep_alive: bool = True, access_log: bool = False):
    import email.utils
    import logging

    from uvicorn.protocols.http.flow_control import FlowControl

    transport = FakeTransport()
    log = logging.getLogger("test")
    scope = {"type": "http", "method": method, "path": "/", "http_version": "1.1", "headers": [],
             "client": ("127.0.0.1", 1), "query_string": b"", "root_path": ""}
    cycle = cls(scope=scope, transport=transport, flow=FlowControl(transport), logger=log, access_logger=log,
                access_log=access_log, default_headers=[(b"date", email.utils.formatdate(usegmt=True).encode()),
                                                        (b"server", b"uvicorn")],
                message_event=asyncio.Event(), expect_100_continue=False, keep_alive=keep_alive,
                on_response=lambda: None)
    return cycle, transport


HEADS = [  # (status, headers, body chunks, method, keep_alive)
    (200, [(b"content-type", b"application/json"), (b"content-length", b"2")], [b"{}"], "POST", True),
    (200, [(b"Content-Length", b"2"), (b"X-Compute-Time", b"3"), (b"x-queue-time", b"0")], [b"{}"], "POST", True),
    (200, [(b"content-type", b"text/plain")], [b"ab", b"c"], "POST", True),  # no length: chunked
    (200, [(b"transfer-encoding", b"Chunked")], [b"xyz"], "POST", True),
    (200, [(b"content-length", b"2"), (b"Connection", b"keep-alive, Close")], [b"{}"], "POST", True),
    (200, [(b"content-length", b"2")], [b"{}"], "POST", False),  # closes: "connection: close" added
    (204, [], [b""], "POST", True),
    (200, [(b"content-length", b"5")], [b""], "HEAD", True),
    (431, [(b"content-length", b"0"), (b"connection", b"close")], [b""], "GET", True),
    (200, [(b"content-length", b"2"), (b"x-v\xe9", b"caf\xe9 \t")], [b"{}"], "POST", True),  # bytes over 127 pass
]


def _run(cls, status, headers, chunks, method="POST", keep_alive=True, access_log=False):
    async def main():
        cycle, transport = _cycle(cls, method, keep_alive, access_log)
        try:
            await cycle.send({"type": "http.response.start", "status": status, "headers": list(headers)})
            for i, chunk in enumerate(chunks):
                await cycle.send({"type": "http.response.body", "body": chunk, "more_body": i < len(chunks) - 1})
        except Exception as e:  # compared between the two cycles
            return type(e), str(e), transport.writes, cycle.response_started
        state = (cycle.keep_alive, cycle.chunked_encoding, cycle.expected_content_length, cycle.response_complete,
                 transport.closed)
        return transport.writes, state

    return asyncio.run(main())


def test_cycle_writes_uvicorns_bytes_and_state_for_every_kind_of_head():
    from uvicorn.protocols.http.httptools_impl import RequestResponseCycle

    from headwise.service.server.http_protocol import Cycle

    for status, headers, chunks, method, keep_alive in HEADS:
        mine = _run(Cycle, status, headers, chunks, method, keep_alive)
        assert mine == _run(RequestResponseCycle, status, headers, chunks, method, keep_alive), headers
    mine = _run(Cycle, 200, [(b"content-length", b"2")], [b"{}"], access_log=True)  # uvicorn's own send
    assert mine == _run(RequestResponseCycle, 200, [(b"content-length", b"2")], [b"{}"], access_log=True)


def test_cycle_refuses_what_uvicorn_refuses_with_its_errors():
    from uvicorn.protocols.http.httptools_impl import RequestResponseCycle

    from headwise.service.server.http_protocol import Cycle

    bad = [[(b"x bad", b"1")], [(b"x-ok", b"1\r\nx-injected: 2")], [(b"x-ok", b"\x00")], [(b"x(", b"1")],
           [(b"x-ok", b"1"), (b"x:", b"\n")], [("x-str", b"1")], [(b"x-ok", 1)]]
    for headers in bad:
        mine = _run(Cycle, 200, headers, [b""])
        assert mine == _run(RequestResponseCycle, 200, headers, [b""]), headers
        assert mine[0] in (RuntimeError, TypeError) and mine[2] == [], headers


def test_the_protocol_runs_requests_on_its_cycle():
    from headwise.service.server.http_protocol import Cycle, HttpProtocol

    started = []

    class Probe(HttpProtocol):
        def __init__(self):  # only what _start_asgi_task reads
            pass

    def record(self, cycle, app):
        started.append(type(cycle))

    from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol, RequestResponseCycle

    original = HttpToolsProtocol._start_asgi_task
    HttpToolsProtocol._start_asgi_task = record
    try:
        cycle, _ = _cycle(RequestResponseCycle)
        Probe()._start_asgi_task(cycle, None)
    finally:
        HttpToolsProtocol._start_asgi_task = original
    assert started == [Cycle] and type(cycle) is Cycle


class ManualLoop:
    """The two calls the connection's timer makes of its loop (time, call_at), on a clock that
    moves only when told: a loaded machine's late wake-ups cannot reorder what a test arms."""

    def __init__(self):
        self.now, self.timers = 0.0, []

    def time(self) -> float:
        return self.now

    def call_at(self, when, callback):
        handle = SimpleNamespace(when=when, callback=callback, cancelled=False)
        handle.cancel = lambda: setattr(handle, "cancelled", True)
        self.timers.append(handle)
        return handle

    def advance(self, to: float) -> None:
        """Fire each timer due by `to`, in order, at its own time."""
        while due := [t for t in self.timers if not t.cancelled and t.when <= to]:
            t = min(due, key=lambda t: t.when)
            self.timers.remove(t)
            self.now = max(self.now, t.when)
            t.callback()
        self.now = to


def test_a_deadline_moved_or_disarmed_is_kept_by_one_lazy_timer():
    from headwise.service.server.http_protocol import HttpProtocol

    class Probe(HttpProtocol):
        def __init__(self, loop):  # only what the timer reads
            self.loop, self._timer, self._deadline, self._why, self.refused = loop, None, None, "", []
            self._timer_at, self.t0 = 0.0, loop.time()

        def _refuse(self, status, message):
            self._disarm()
            self.refused.append((status, message, round(self.loop.time() - self.t0, 2)))

    loop = ManualLoop()
    p = Probe(loop)
    p._arm(0.05, "head")
    first = p._timer
    loop.advance(0.03)
    p._arm(0.1, "body")  # due at 0.13: the timer set for 0.05 stays, and waits on
    assert p._timer is first and len(loop.timers) == 1
    loop.advance(0.10)
    assert p.refused == [] and p._timer is not None and p._timer is not first and p._timer.when == 0.13
    loop.advance(0.20)
    assert p.refused == [(408, "body", 0.13)]
    early = Probe(loop)
    early._arm(0.5, "body")
    early._arm(0.02, "sooner")  # due before the timer: the timer moves
    loop.advance(0.26)
    assert [(s, m) for s, m, _ in early.refused] == [(408, "sooner")] and early.refused[0][2] == 0.02
    q = Probe(loop)
    q._arm(0.02, "head")
    q._disarm()
    loop.advance(0.5)
    assert q.refused == [] and q._timer is None  # it fired, found nothing due, and is gone


def test_keep_alive_is_kept_on_the_same_timer_and_closes_an_idle_connection_without_an_answer():
    from types import SimpleNamespace

    from headwise.service.server.http_protocol import HttpProtocol

    class Probe(HttpProtocol):
        def __init__(self, loop):  # only what a response's completion and the timer read
            self.loop, self._timer, self._timer_at, self._deadline, self._why = loop, None, 0.0, None, ""
            self._in_body, self._bounds = False, SimpleNamespace(head_timeout_s=0.2)
            self.server_state, self.transport = SimpleNamespace(total_requests=0), FakeTransport()
            self.flow, self.pipeline = SimpleNamespace(resume_reading=lambda: None), []
            self.timeout_keep_alive = 0.03

    async def main():
        loop = asyncio.get_running_loop()
        idle, busy = Probe(loop), Probe(loop)
        idle.on_response_complete()
        busy.on_response_complete()
        first = idle._timer
        busy._unset_keepalive_if_required()  # its client sent something: the head is due now
        assert busy._why == "request head not received in time"
        busy._arm(0.2, "head")
        busy._unset_keepalive_if_required()  # a head's deadline is not keep-alive's
        await asyncio.sleep(0.08)
        assert idle.transport.closed and idle.transport.writes == [] and first is not None
        assert not busy.transport.closed and busy._why == "head"
        assert idle.server_state.total_requests == 1

    asyncio.run(main())
