"""server.http_protocol's one timer per connection, on a real uvicorn server and real sockets:
each deadline (head, body, uvicorn's keep-alive) is kept at its own time, whichever came
before it, including a keep-alive due before a body's deadline and bytes that begin no request."""

import asyncio
import functools
import socket
import threading
import time

import pytest
import uvicorn

from headwise.service.server.http_protocol import Bounds, HttpProtocol

KEEP_ALIVE, HEAD, BODY = 0.2, 1.5, 3.0


async def app(scope, receive, send):
    if scope["type"] != "http":
        return
    if scope["path"] != "/early":  # /early answers before reading its body
        while (await receive()).get("more_body"):
            pass
    await send({"type": "http.response.start", "status": 200, "headers": [(b"content-length", b"2")]})
    await send({"type": "http.response.body", "body": b"ok"})


@pytest.fixture(scope="module", params=["asyncio", "uvloop"])
def port(request):
    bounds = Bounds(max_connections=100, max_head_bytes=8192, max_headers=100, head_timeout_s=HEAD,
                    body_timeout_s=BODY)
    config = uvicorn.Config(app, host="127.0.0.1", port=0, http=functools.partial(HttpProtocol, bounds=bounds),
                            loop=request.param, timeout_keep_alive=KEEP_ALIVE, log_level="warning", lifespan="off")
    server = uvicorn.Server(config)
    thread = threading.Thread(target=lambda: asyncio.run(server.serve()) if request.param == "asyncio"
                              else __import__("uvloop").run(server.serve()), daemon=True)
    thread.start()
    while not server.started:
        time.sleep(0.01)
    yield server.servers[0].sockets[0].getsockname()[1]
    server.should_exit = True
    thread.join(5)


def closed(port: int, *steps) -> tuple[float, bytes]:
    """Sends each step (bytes, or seconds to wait); → (seconds from the first until the server
    closed the connection, everything it sent)."""
    s = socket.create_connection(("127.0.0.1", port))
    s.settimeout(BODY + 5)
    t0 = time.monotonic()
    for step in steps:
        if isinstance(step, bytes):
            s.sendall(step)
        else:
            time.sleep(step)
    got = b""
    while chunk := s.recv(65536):
        got += chunk
    s.close()
    return time.monotonic() - t0, got


GET = b"GET / HTTP/1.1\r\nhost: x\r\n\r\n"


def test_an_idle_connection_closes_at_keep_alive_not_at_the_head_deadline(port):
    took, got = closed(port, GET)
    assert got.count(b"HTTP/1.1 200") == 1 and took < HEAD - 0.5


def test_keep_alive_after_a_slow_body_comes_before_the_body_deadline(port):
    took, got = closed(port, b"POST / HTTP/1.1\r\nhost: x\r\ncontent-length: 1\r\n\r\n", 0.3, b"x")
    assert got.count(b"HTTP/1.1 200") == 1 and b"408" not in got and took < 0.3 + HEAD - 0.5


def test_a_slow_second_head_gets_408_at_the_head_deadline(port):
    took, got = closed(port, GET, 0.05, b"GET / HTTP/1.1\r\n")
    assert got.count(b"HTTP/1.1 200") == 1 and b"HTTP/1.1 408" in got and b"head not received" in got
    assert HEAD - 0.2 < took < BODY


def test_bytes_that_begin_no_request_are_held_to_the_head_deadline(port):
    took, got = closed(port, GET, 0.05, b"\r\n")
    assert got.count(b"HTTP/1.1 200") == 1 and b"HTTP/1.1 408" in got and took < BODY


def test_a_body_still_coming_after_its_answer_closes_at_keep_alive_when_it_stalls(port):
    took, got = closed(port, b"POST /early HTTP/1.1\r\nhost: x\r\ncontent-length: 10\r\n\r\nab")
    assert got.count(b"HTTP/1.1 200") == 1 and b"408" not in got and took < HEAD - 0.5
