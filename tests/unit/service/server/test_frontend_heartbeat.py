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
        time.sleep(1.5)
        assert beats.silent_for(2) < 1.0  # it keeps beating (every 0.1 s): not the first beat's age
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


def test_the_server_is_ready_once_every_front_end_has_served_and_stays_so(tmp_path):
    from headwise.service.server.frontend import Siblings

    beats = Heartbeats.create(tmp_path / "heartbeats")
    mine = Siblings(beats, 0, 3)
    assert mine.starting() == "2 of 3 front-ends still starting"
    beats.beat(0)  # its own beat is not waited for: it answers the probe
    beats.beat(2)
    assert mine.starting() == "1 of 3 front-ends still starting"
    beats.beat(1)
    assert mine.starting() is None
    beats.rest(1)  # a sibling started again later: the server stays ready
    assert mine.starting() is None
    assert Siblings(beats, 1, 3).starting() is None  # the one started again: its siblings serve
    beats.rest(2)
    assert Siblings(beats, 1, 3).starting() == "1 of 3 front-ends still starting"  # two at once: it waits
    assert Siblings(beats, 0, 1).starting() is None


def test_ready_probes_say_why_while_a_sibling_starts(client):
    engine = client.app.state.engine
    engine.waiting_for = lambda: "1 of 2 front-ends still starting"
    r = client.get("/health/ready")
    assert r.status_code == 503 and "1 of 2 front-ends still starting" in r.text
    assert client.get("/v2/health/ready").status_code == 503 and client.get("/health/live").status_code == 200
    assert client.post("/v1/embed", json={"inputs": ["served meanwhile"]}).status_code == 200
    engine.waiting_for = lambda: None
    assert client.get("/health/ready").status_code == 200
