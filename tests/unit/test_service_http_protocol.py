"""CoalescingTransport: a response's head and body leave in one write."""

import asyncio

from service.http_protocol import CoalescingTransport


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
