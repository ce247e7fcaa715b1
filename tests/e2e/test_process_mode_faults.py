"""Process mode's faults and shutdown end to end (docs/architecture.md#process-mode): a real
`headwise serve` supervisor, its engine process and front-end processes on the tiny package,
with a slow device (HEADWISE_FAULT_ENGINE_DELAY_MS).

- A slow device with 3 front-ends: concurrent requests each get their own answer, with
  disconnects and client errors mixed in.
- The engine killed: 503 and not ready within 1 s, and the supervisor exits non-zero.
- A front-end killed: it is started again, on its predecessor's socket; the other
  front-ends' clients see no error. A hung one, or one stuck starting, is killed and started
  again, and the clients that waited on its socket are answered.
- SIGTERM with requests in flight: none is lost, exit 0; SIGTERM while front-ends start: exit 0.
"""

from __future__ import annotations

import http.client
import json
import os
import signal
import threading
import time
from concurrent.futures import ThreadPoolExecutor

import httpx
import numpy as np
import pytest

from tests.fixtures.metrics import total
from tests.fixtures.procfs import cmdline, holder, holders, listener, roles

pytestmark = [pytest.mark.slow, pytest.mark.timeout(600)]


def _slow(start_server, tiny_package, frontends: int, delay_ms: int, wait: str | None = "ready", **env):
    return start_server(models=tiny_package.parent, wait=wait, env={
        "HEADWISE_ENGINE": "process", "HEADWISE_FRONTENDS": str(frontends), "HEADWISE_FAULT_INJECTION": "true",
        "HEADWISE_FAULT_ENGINE_DELAY_MS": str(delay_ms), "HEADWISE_MAX_WAIT_MS": "0", **env})


def _alone(srv, texts) -> dict[str, list[float]]:
    """Each text's embedding asked for alone, one request at a time."""
    out = {}
    for t in texts:
        r = srv.post("/v1/embed", json={"inputs": [t]})
        assert r.status_code == 200, r.text
        out[t] = r.json()["data"][0]["embedding"]
    return out


def test_slow_device_three_front_ends_each_request_gets_its_own(start_server, tiny_package):
    srv = _slow(start_server, tiny_package, 3, 30, HEADWISE_MAX_INPUT_CHARS="400")
    texts = [f"sentence number {i} about {'cats' if i % 2 else 'dogs'} " * (1 + i % 4) for i in range(36)]
    want = _alone(srv, texts)

    def one(i: int):
        t = texts[i]
        if i % 9 == 4:  # a client that gives up mid-request
            with pytest.raises(httpx.TimeoutException):
                httpx.post(srv.url + "/v1/embed", json={"inputs": [t]}, timeout=0.01)
            return "gone"
        if i % 9 == 7:  # a client mistake: too long
            r = httpx.post(srv.url + "/v1/embed", json={"inputs": ["x" * 500]}, timeout=60)
            assert r.status_code == 413, r.text
            return "refused"
        r = httpx.post(srv.url + "/v1/embed", json={"inputs": [t, texts[-1 - i]]}, timeout=60)
        assert r.status_code == 200, r.text
        got = [d["embedding"] for d in r.json()["data"]]
        np.testing.assert_allclose(got[0], want[t], atol=1e-5)
        np.testing.assert_allclose(got[1], want[texts[-1 - i]], atol=1e-5)
        return "ok"

    with ThreadPoolExecutor(12) as pool:
        outcomes = list(pool.map(one, range(len(texts))))
    assert outcomes.count("ok") == 28 and outcomes.count("gone") == 4 and outcomes.count("refused") == 4
    assert srv.get("/health/ready").status_code == 200


def test_the_queue_bound_is_the_whole_servers_with_retry_after(start_server, tiny_package):
    srv = _slow(start_server, tiny_package, 2, 300, HEADWISE_MAX_QUEUE="4", HEADWISE_MAX_CLIENT_BATCH="4")
    want = _alone(srv, ["one input"])["one input"]

    def one(_):
        return httpx.post(srv.url + "/v1/embed", json={"inputs": ["one input"]}, timeout=60)

    with ThreadPoolExecutor(24) as pool:
        answers = list(pool.map(one, range(24)))
    full = [r for r in answers if r.status_code == 429]
    assert full and all(r.status_code in (200, 429) for r in answers), [r.status_code for r in answers]
    assert all(r.headers.get("retry-after") for r in full)
    assert "4 inputs waiting across the front-ends" in full[0].json()["error"]["message"]
    for r in answers:
        if r.status_code == 200:
            np.testing.assert_allclose(r.json()["data"][0]["embedding"], want, atol=1e-5)


def test_engine_killed_turns_every_front_end_not_ready_within_a_second(start_server, tiny_package):
    srv = _slow(start_server, tiny_package, 2, 400)
    engine = roles(srv)["engine"][0]
    asking = {pid: cs[0] for pid, cs in _connections(srv, roles(srv)["frontend"], 1).items()}
    inflight = []
    t = threading.Thread(target=lambda: inflight.append(srv.post("/v1/embed", json={"inputs": ["in flight"]})))
    t.start()
    time.sleep(0.2)
    os.kill(engine, signal.SIGKILL)
    killed = time.monotonic()
    told: dict[int, int | str] = {}  # each front-end's first answer that is not 200
    while len(told) < len(asking) and time.monotonic() - killed < 1.0:
        for pid, c in asking.items():
            if pid in told:
                continue
            try:
                c.request("GET", "/health/ready")
                r = c.getresponse()
                r.read()
                status: int | str = r.status
            except (OSError, http.client.HTTPException):
                status = "closed"  # the supervisor is already stopping it (exit 3)
            if status != 200:
                told[pid] = status
        time.sleep(0.02)
    assert len(told) == len(asking) and time.monotonic() - killed < 1.0, told
    assert 503 in told.values(), told
    t.join(10)
    assert inflight and inflight[0].status_code == 503, inflight[0].text
    assert "engine process is gone" in inflight[0].json()["error"]["message"]
    assert srv.proc.wait(30) == 3


def test_a_stuck_device_run_is_killed_after_the_stall_limit_and_the_server_exits_3(start_server, tiny_package):
    srv = _slow(start_server, tiny_package, 1, 20_000, HEADWISE_ENGINE_STALL_S="1")
    t0 = time.monotonic()
    r = srv.post("/v1/embed", json={"inputs": ["a run that never ends"]})
    assert r.status_code == 503 and "engine process is gone" in r.json()["error"]["message"], r.text
    assert time.monotonic() - t0 < 10  # the stall limit (1 s), not the run (20 s)
    assert srv.proc.wait(30) == 3
    assert "over HEADWISE_ENGINE_STALL_S=1" in srv.log_tail()


def _connections(srv, frontends: list[int], each: int) -> dict[int, list]:
    """Keep-alive connections until each front-end holds at least `each` (at most 3). The
    server is ready once one front-end serves; a sibling may still be starting (a loaded
    machine), so this keeps trying for a while."""
    conns: dict[int, list] = {pid: [] for pid in frontends}
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        c = http.client.HTTPConnection("127.0.0.1", srv.port, timeout=30)
        c.request("GET", "/health/live")  # quick: no device run, so no keep-alive times out
        c.getresponse().read()
        pid = holder(frontends, c.sock.getsockname()[1])
        if pid is not None and len(conns[pid]) < max(each, 3):
            conns[pid].append(c)
        else:
            c.close()
            time.sleep(0.02)
        if all(len(v) >= each for v in conns.values()):
            break
    assert all(len(v) >= each for v in conns.values()), {p: len(v) for p, v in conns.items()}
    return conns


def test_a_client_gone_while_its_run_waits_in_the_engine_is_dropped_there(start_server, tiny_package):
    srv = _slow(start_server, tiny_package, 2, 600)
    body = json.dumps({"inputs": ["a client"]})
    busy, waiting = (cs[0] for cs in _connections(srv, roles(srv)["frontend"], 1).values())
    before = total(srv.get("/metrics").text, "headwise_engine_dropped_rows_total")
    answers = []

    def send(c, then_leave: bool):
        c.request("POST", "/v1/embed", body, {"content-type": "application/json"})
        if then_leave:  # its run waits in the engine behind the other front-end's
            time.sleep(0.2)
            c.sock.shutdown(2)
            c.close()
        else:
            answers.append(c.getresponse().status)

    first = threading.Thread(target=send, args=(busy, False))
    first.start()
    time.sleep(0.1)
    send(waiting, True)
    first.join(30)
    assert answers == [200]
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        dropped = total(srv.get("/metrics").text, "headwise_engine_dropped_rows_total")
        if dropped - before >= 1:
            break
        time.sleep(0.2)
    assert dropped - before == 1
    assert srv.post("/v1/embed", json={"inputs": ["after"]}).status_code == 200


def test_a_killed_front_end_is_restarted_and_the_others_see_no_error(start_server, tiny_package):
    srv = _slow(start_server, tiny_package, 2, 50)
    frontends = roles(srv)["frontend"]
    body = json.dumps({"inputs": ["a client"]})
    conns = _connections(srv, frontends, 2)
    victim, other = frontends
    socket_of_slot = listener(victim)
    outcomes: dict[int, list] = {}
    stop = threading.Event()

    def client(pid: int, c: http.client.HTTPConnection):
        mine = outcomes.setdefault(id(c), [pid])
        while not stop.is_set():
            try:
                c.request("POST", "/v1/embed", body, {"content-type": "application/json"})
                r = c.getresponse()
                r.read()
                mine.append(r.status)
            except OSError as e:
                mine.append(type(e).__name__)
                return

    threads = [threading.Thread(target=client, args=(pid, c)) for pid, cs in conns.items() for c in cs]
    for th in threads:
        th.start()
    time.sleep(1.0)
    os.kill(victim, signal.SIGKILL)
    time.sleep(1.0)
    stop.set()
    for th in threads:
        th.join(30)
    seen = {pid: [o for got in outcomes.values() if got[0] == pid for o in got[1:]] for pid in frontends}
    assert seen[other] and all(o == 200 for o in seen[other]), seen[other]  # no error at all
    assert all(o == 200 or isinstance(o, str) for o in seen[victim])  # only its connections broke
    assert any(isinstance(o, str) for o in seen[victim])
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline and len([p for p in roles(srv)["frontend"] if p != victim]) < 2:
        time.sleep(0.1)
    assert len(roles(srv)["frontend"]) == 2 and victim not in roles(srv)["frontend"]
    for _ in range(6):
        assert srv.post("/v1/embed", json={"inputs": ["after"]}).status_code == 200
    # The new front-end took up its predecessor's socket (the supervisor kept it), and once it
    # serves, new connections reach both again.
    now = roles(srv)["frontend"]
    (new,) = set(now) - {other}
    assert listener(new) == socket_of_slot
    for cs in _connections(srv, now, 1).values():
        for c in cs:
            c.close()
    assert set(holders(srv, now, 24)) == set(now)


def test_a_hung_front_end_is_killed_and_its_socket_s_clients_are_served_by_the_next(start_server, tiny_package):
    """SIGSTOP on one of 2 front-ends: alive, its socket still given its share of new
    connections, none served. Its loop falls silent, the supervisor kills it past
    HEADWISE_FRONTEND_STALL_S and starts another on the same socket, which answers the
    connections that waited there: every request sent meanwhile gets its answer."""
    srv = _slow(start_server, tiny_package, 2, 0, HEADWISE_FRONTEND_STALL_S="1")
    frontends = roles(srv)["frontend"]
    for cs in _connections(srv, frontends, 1).values():  # both serve, so both beat
        for c in cs:
            c.close()
    victim, other = frontends
    socket_of_slot = listener(victim)
    os.kill(victim, signal.SIGSTOP)
    with ThreadPoolExecutor(12) as pool:
        answers = list(pool.map(lambda i: httpx.post(srv.url + "/v1/embed", json={"inputs": [f"text {i}"]},
                                                     timeout=120).status_code, range(12)))
    assert answers == [200] * 12
    assert "is hung; killing it" in srv.log_tail() and "HEADWISE_FRONTEND_STALL_S=1" in srv.log_tail()
    now = roles(srv)["frontend"]
    assert victim not in now and other in now and len(now) == 2
    (new,) = set(now) - {other}
    assert listener(new) == socket_of_slot
    assert set(holders(srv, now, 24)) == set(now)


def test_a_front_end_stuck_starting_is_killed_and_its_socket_s_clients_are_served_by_the_next(
        start_server, tiny_package):
    """A front-end started again after a crash, then stopped (SIGSTOP) before it serves: its
    socket takes its share of new connections, and it never beats. Past
    HEADWISE_FRONTEND_START_S the supervisor kills it and starts another on the same socket,
    which answers the connections that waited there."""
    srv = _slow(start_server, tiny_package, 2, 0, HEADWISE_FRONTEND_START_S="4")
    victim, other = roles(srv)["frontend"]
    socket_of_slot = listener(victim)
    os.kill(victim, signal.SIGKILL)
    deadline = time.monotonic() + 30
    while not (new := [p for p in set(roles(srv)["frontend"]) - {victim, other} if _is_frontend(p)]):
        assert time.monotonic() < deadline, srv.log_tail()
        time.sleep(0.002)
    (stuck,) = new
    os.kill(stuck, signal.SIGSTOP)  # while it imports: it never serves
    with ThreadPoolExecutor(12) as pool:
        answers = list(pool.map(lambda i: httpx.post(srv.url + "/v1/embed", json={"inputs": [f"text {i}"]},
                                                     timeout=120).status_code, range(12)))
    assert answers == [200] * 12
    log = srv.log_tail()
    assert "is stuck starting; killing it" in log and "HEADWISE_FRONTEND_START_S=4" in log
    now = roles(srv)["frontend"]
    assert stuck not in now and other in now and len(now) == 2
    (fresh,) = set(now) - {other}
    assert listener(fresh) == socket_of_slot
    assert srv.get("/health/ready").status_code == 200


def _is_frontend(pid: int) -> bool:
    """Whether `pid` runs the front-end's code already (a child stopped between fork and exec
    would stop the supervisor, which waits for the exec)."""
    try:
        return "server.frontend" in cmdline(pid)
    except OSError:
        return False


def test_sigterm_with_requests_in_flight_loses_none_and_exits_0(start_server, tiny_package):
    srv = _slow(start_server, tiny_package, 2, 300, HEADWISE_GRACE_SECONDS="20")
    with ThreadPoolExecutor(8) as pool:
        futures = [pool.submit(srv.post, "/v1/embed", json={"inputs": [f"text {i}"]}) for i in range(8)]
        deadline = time.monotonic() + 30  # all 8 taken in by the front-ends (+ this scrape)
        while total(srv.metrics(), "headwise_inflight_requests") < 9:
            assert time.monotonic() < deadline, "the 8 requests never were in flight together"
            time.sleep(0.02)
        srv.signal(signal.SIGTERM)
        codes = [f.result().status_code for f in futures]
    assert codes == [200] * 8
    assert srv.proc.wait(60) == 0, srv.log_tail()


def test_sigterm_while_the_front_ends_still_start_exits_0(start_server, tiny_package):
    """SIGTERM just after the supervisor spawned the front-ends, while they import: one killed
    before it installed its handlers held nothing, so the stop is clean (exit 0)."""
    srv = _slow(start_server, tiny_package, 2, 0, wait=None)
    deadline = time.monotonic() + 120
    while "front-end(s) on http://" not in srv.log_tail():
        assert time.monotonic() < deadline and srv.proc.poll() is None, srv.log_tail()
        time.sleep(0.005)
    srv.signal(signal.SIGTERM)
    assert srv.proc.wait(60) == 0, srv.log_tail()


def test_an_engine_that_cannot_start_stops_the_server_saying_why(tiny_package, tmp_path):
    """A graph onnxruntime refuses, its hash in order: the checks before start-up pass, the
    engine's session does not; the supervisor exits 3, naming the failure, and never listens."""
    import hashlib
    import shutil
    import subprocess
    import sys

    from tests.e2e.conftest import REPO, clean_env
    from tests.fixtures.ports import free_port

    bad = tmp_path / "models" / tiny_package.name
    shutil.copytree(tiny_package, bad)
    (bad / "fast.onnx").write_bytes(b"not an onnx graph")
    manifest = json.loads((bad / "manifest.json").read_text())
    manifest["variants"]["fast"]["sha256"] = hashlib.sha256(b"not an onnx graph").hexdigest()
    (bad / "manifest.json").write_text(json.dumps(manifest))
    port = free_port()
    proc = subprocess.run([sys.executable, "-m", "headwise.cli", "serve", "--models", str(bad.parent), "--port",
                           str(port)], cwd=REPO, env=clean_env(HEADWISE_ENGINE="process", HEADWISE_FRONTENDS="2"),
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 3, proc.stderr[-3000:]
    assert "model start-up failed" in proc.stderr and "fast.onnx" in proc.stderr
    assert "exited with code 3 before it was ready" in proc.stderr
    assert "Traceback" not in proc.stderr


def test_a_port_another_server_listens_on_stops_the_server_saying_why(tiny_package):
    """Another server of the same user on the port, its socket open to SO_REUSEPORT: the
    front-ends' group must not join it (it would take a share of the connections); exit 2,
    naming the address, and the engine is stopped."""
    import socket
    import subprocess
    import sys

    from tests.e2e.conftest import REPO, clean_env

    other = socket.socket()
    other.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
    other.bind(("127.0.0.1", 0))
    other.listen()
    port = other.getsockname()[1]
    try:
        proc = subprocess.run([sys.executable, "-m", "headwise.cli", "serve", "--models", str(tiny_package.parent),
                               "--host", "127.0.0.1", "--port", str(port)], cwd=REPO,
                              env=clean_env(HEADWISE_ENGINE="process", HEADWISE_FRONTENDS="2"),
                              capture_output=True, text=True, timeout=120)
    finally:
        other.close()
    assert proc.returncode == 2, proc.stderr[-3000:]
    assert f"cannot listen on 127.0.0.1:{port}" in proc.stderr and "Traceback" not in proc.stderr
