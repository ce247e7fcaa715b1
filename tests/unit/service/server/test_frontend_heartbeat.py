"""A front-end's heartbeat (process mode): while uvicorn serves, each turn of its main loop
writes the time into the front-end's cell, so a loop that stops turning shows as silence to the
supervisor; once the server stops (it drains), the cell rests and is not watched."""

from __future__ import annotations

import asyncio
import socket
import threading
import time

import uvicorn

from headwise.service.backends.queues import Heartbeats
from headwise.service.server.frontend import _beating, _heartbeats


async def _app(scope, receive, send):
    if scope["type"] == "lifespan":
        while (await receive())["type"] != "lifespan.shutdown":
            await send({"type": "lifespan.startup.complete"})
        await send({"type": "lifespan.shutdown.complete"})


def _wait(cond, timeout=10.0):
    deadline = time.monotonic() + timeout
    while not cond():
        assert time.monotonic() < deadline
        time.sleep(0.01)


def test_a_serving_front_end_beats_in_its_slot_and_rests_once_it_stops(tmp_path):
    beats = Heartbeats.create(tmp_path / "heartbeats")
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    server = _beating(beats, 2)(uvicorn.Config(_app, log_level="warning", lifespan="on"))
    thread = threading.Thread(target=lambda: asyncio.run(server.serve(sockets=[sock])))
    thread.start()
    try:
        _wait(lambda: beats.silent_for(2) > 0)
        time.sleep(0.5)
        assert beats.silent_for(2) < 0.4  # it keeps beating (every 0.1 s)
        assert beats.silent_for(1) == 0.0  # only its own slot
    finally:
        server.should_exit = True
        thread.join(10)
        sock.close()
    assert beats.silent_for(2) == 0.0


def test_a_front_end_finds_the_cells_beside_the_engine_socket_or_beats_nowhere(tmp_path):
    assert _heartbeats(f"ipc://{tmp_path}/engine.sock") is None  # no supervisor made them
    Heartbeats.create(tmp_path / "heartbeats")
    assert _heartbeats(f"ipc://{tmp_path}/engine.sock") is not None
    assert _heartbeats("tcp://127.0.0.1:5555") is None and _heartbeats(None) is None
