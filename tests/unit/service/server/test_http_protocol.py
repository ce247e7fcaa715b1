"""CoalescingTransport: a response's head and body leave in one write."""

import asyncio

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
                 "_unsupported_upgrade_warning", "send_400_response", "shutdown", "on_message_begin",
                 "on_url", "on_header", "on_headers_complete", "on_message_complete", "connection_lost"):
        assert callable(getattr(HttpToolsProtocol, name)), name
    cycle_fields = RequestResponseCycle.__init__.__code__.co_names
    assert "connections" in HttpToolsProtocol.__init__.__code__.co_names
    for field in ("more_body", "disconnected", "response_complete", "message_event"):
        assert field in cycle_fields, field


def test_a_refusal_is_a_complete_json_response_that_closes():
    import json

    from headwise.service.server.http_protocol import refusal

    raw = refusal(431, "request head over 65536 bytes")
    head, body = raw.split(b"\r\n\r\n", 1)
    assert head.startswith(b"HTTP/1.1 431 Request Header Fields Too Large\r\n")
    assert b"connection: close" in head and b"content-length: %d" % len(body) in head
    assert json.loads(body) == {"error": {"message": "request head over 65536 bytes",
                                          "type": "request_header_fields_too_large", "code": 431}}
