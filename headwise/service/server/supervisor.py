"""`headwise serve` in process mode (HEADWISE_ENGINE=process; docs/architecture.md#process-mode):
the supervisor starts one engine process, which loads and warms the sessions, waits until it
answers, binds a listening socket per front-end (SO_REUSEPORT: the kernel spreads the
connections) and starts HEADWISE_FRONTENDS front-end processes on them. Then it watches them:

- a front-end that dies is started again (only the requests it held fail); one that keeps
  dying within seconds of its start stops the server, exit 3;
- a front-end whose event loop has not turned for over HEADWISE_FRONTEND_STALL_S (its
  heartbeat) is hung: its socket would keep taking its share of new connections, so the
  supervisor kills it, and the above follows; so it does with one that has not served
  HEADWISE_FRONTEND_START_S after its start (stuck while it imports or loads);
- when the engine dies, the front-ends turn not ready and answer 503 (their watchdog), and
  the supervisor stops them and exits 3, so that Docker or Kubernetes restarts the server;
- a device run that lasts over HEADWISE_ENGINE_STALL_S (the engine's run clock) means a stuck
  device: the supervisor kills the engine, and the above follows;
- SIGTERM, SIGINT or SIGHUP: the listeners close, the front-ends drain (the requests they
  accepted are answered), then the engine finishes what it was sent; exit 0.

Children run in their own session (a Ctrl-C reaches the supervisor only, which orders the
stop) and get SIGTERM if the supervisor itself dies.
"""

from __future__ import annotations

import contextlib
import ctypes
import logging
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time

import zmq

from headwise.service.backends import wire
from headwise.service.backends.queues import (
    HEARTBEATS_FILE,
    RUN_CLOCK_FILE,
    Heartbeats,
    RunClock,
    beside,
)
from headwise.service.cpu import usable_cores
from headwise.service.logs import configure
from headwise.service.settings import Settings, frontend_processes

log = logging.getLogger("headwise.supervisor")

POLL_S = 0.05
CRASH_WINDOW_S = 10.0  # a front-end that dies this soon after its start...
CRASH_LIMIT = 3  # ...this many times in a row stops the server
ENGINE_LOST_LINGER_S = 1.0  # front-ends keep answering 503 this long before they are stopped
PR_SET_PDEATHSIG = 1


def _die_with_parent() -> None:
    with contextlib.suppress(OSError, AttributeError):  # not Linux: no such call, children may outlive us
        ctypes.CDLL(None, use_errno=True).prctl(PR_SET_PDEATHSIG, signal.SIGTERM)


def _spawn(args: list[str], env: dict, pass_fds: tuple[int, ...] = ()) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-m", *args], env=env, pass_fds=pass_fds, start_new_session=True,
                            preexec_fn=_die_with_parent)


def _say(msg: str) -> None:
    log.log(logging.ERROR if msg.startswith("error:") else logging.INFO, msg)


def _wait_for_engine(engine: subprocess.Popen, address: str, stopping) -> bool:
    """Until the engine answers hello (True), exits or a stop is asked (False)."""
    ctx = zmq.Context()
    sock = ctx.socket(zmq.DEALER)
    sock.connect(address)
    try:
        while engine.poll() is None and not stopping():
            sock.send_multipart(wire.encode(wire.Hello()))
            if sock.poll(500):
                msg, _ = wire.decode(sock.recv_multipart())
                return isinstance(msg, wire.Welcome)
        return False
    finally:
        ctx.destroy(linger=0)


def _run_clock(address: str) -> RunClock | None:
    """The engine's run clock (None from an engine that keeps none: bench's stand-ins may not)."""
    path = beside(address, RUN_CLOCK_FILE)
    try:
        return RunClock(path) if path else None
    except OSError:
        return None


def _listen(settings: Settings, n: int) -> list[socket.socket]:
    """The front-ends' sockets: on Linux with several front-ends, one per front-end, bound to the
    one address with SO_REUSEPORT, so that the kernel spreads new connections over them by
    their addresses. One socket shared by all lets whichever front-end wakes first accept a
    whole burst, and keep-alive connections stay where they landed: a front-end still starting,
    or busy, could be left idle (bench/results/reuseport-1129.md).

    Each listens from the start, so a connection given to a front-end still starting waits in
    its queue until it serves (rather than land on a sibling for good, as a socket that listened
    only once its front-end did would let the first one ready take them all). The supervisor
    holds every socket, so a restarted front-end takes up its predecessor's, and the connections
    waiting in its queue. A port something already listens on is refused first (OSError): a
    second server of the same user could otherwise join the group and take a share of the
    connections. Elsewhere (one front-end, or not Linux, where SO_REUSEPORT does not spread TCP
    connections) there is one socket, which every front-end shares."""
    family = socket.AF_INET6 if ":" in settings.host else socket.AF_INET
    spread = n > 1 and sys.platform.startswith("linux") and hasattr(socket, "SO_REUSEPORT")
    socks, port = [], settings.port
    if spread and port:
        with socket.socket(family, socket.SOCK_STREAM) as probe:
            probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            probe.bind((settings.host, port))  # EADDRINUSE when anything listens there
    try:
        for _ in range(n if spread else 1):
            sock = socket.socket(family, socket.SOCK_STREAM)
            socks.append(sock)
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            if spread:
                sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
            sock.bind((settings.host, port))
            port = sock.getsockname()[1]  # port 0: the others join the one the first was given
            sock.listen(2048)
            sock.set_inheritable(True)
    except OSError:
        for sock in socks:
            sock.close()
        raise
    return socks * n if not spread else socks


def _hung(p: subprocess.Popen, silent_s: float, stall_s: float) -> bool:
    """Whether front-end `p` is hung (its loop silent over `stall_s`); one that is is killed."""
    return bool(stall_s) and silent_s > stall_s and _killed(
        p, f"'s event loop has not turned for {silent_s:.0f} s, over HEADWISE_FRONTEND_STALL_S={stall_s:g}: it is hung")


def _stuck_starting(p: subprocess.Popen, starting_s: float, start_s: float) -> bool:
    """Whether front-end `p`, `starting_s` after its start and never yet beating, is stuck
    starting (over `start_s`): its socket takes its share of new connections meanwhile, so it is
    killed as a hung one is."""
    return bool(start_s) and starting_s > start_s and _killed(
        p, f" has not served {starting_s:.0f} s after its start, over HEADWISE_FRONTEND_START_S={start_s:g}: it is "
        "stuck starting")


def _killed(p: subprocess.Popen, why: str) -> bool:
    """SIGKILL to front-end `p`, saying `why` (it is started again once it has exited: a process
    in uninterruptible sleep may take a while, and the supervisor's loop does not wait for it)."""
    _say(f"error: front-end {p.pid}{why}; killing it")
    p.kill()
    return True


def _soon(now: float, started: float, serving: float | None, hung: bool, stall_s: float) -> bool:
    """Whether a front-end's end counts toward the stop (CRASH_LIMIT in a row): a crash within
    CRASH_WINDOW_S of its start, a hang before it ever served, or one within CRASH_WINDOW_S of
    its first beat (seen only `stall_s` later). Any may happen again to the next one."""
    if hung:
        return serving is None or now - serving < CRASH_WINDOW_S + stall_s
    return now - started < CRASH_WINDOW_S


def stopped_cleanly(code: int) -> bool:
    """A child's exit code after the supervisor's SIGTERM: 0, or the SIGTERM's own default
    action. Front-ends and the engine install their handlers before they accept any work, so
    one that SIGTERM killed was still starting (importing) and held nothing."""
    return code in (0, -signal.SIGTERM)


def _stop(procs: list[subprocess.Popen], timeout: float) -> list[int]:
    """SIGTERM to each, then wait (SIGKILL past `timeout`) → their exit codes."""
    for p in procs:
        if p.poll() is None:
            p.send_signal(signal.SIGTERM)
    deadline = time.monotonic() + timeout
    codes = []
    for p in procs:
        try:
            codes.append(p.wait(max(0.0, deadline - time.monotonic())))
        except subprocess.TimeoutExpired:
            _say(f"process {p.pid} did not stop within {timeout:.0f}s; killing it")
            p.kill()
            codes.append(p.wait())
    return codes


ENGINE = ["headwise.service.server.engine_process"]


def run(settings: Settings, log_level: str, access_log: bool, engine_module: list[str] = ENGINE) -> int:
    """`engine_module`: the engine process's `python -m` arguments (bench/ gives a device
    stand-in's); it must answer `Hello` at HEADWISE_ENGINE_ADDRESS as EngineCore does."""
    configure("info", settings.log_format, "headwise serve: %(message)s")  # what it says is always shown
    n = frontend_processes(settings, usable_cores())
    work = tempfile.mkdtemp(prefix="headwise-")
    address = f"ipc://{work}/engine.sock"
    env = dict(os.environ, HEADWISE_ENGINE="process", HEADWISE_ENGINE_ADDRESS=address, HEADWISE_WORKERS="1")
    if not env.get("PROMETHEUS_MULTIPROC_DIR"):
        os.mkdir(metrics_dir := os.path.join(work, "metrics"))
        env["PROMETHEUS_MULTIPROC_DIR"] = metrics_dir
    env.setdefault("TOKENIZERS_PARALLELISM", "false")  # one tokenizer thread per front-end

    signals = []
    for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
        signal.signal(sig, lambda s, _: signals.append(s))
    engine = _spawn(engine_module, env)
    frontends: dict[int, subprocess.Popen] = {}
    try:
        _say(f"process mode: engine process {engine.pid} is loading the models")
        if not _wait_for_engine(engine, address, lambda: bool(signals)):
            if signals:
                _stop([engine], settings.grace_seconds)
                return 0
            _say(f"error: the engine process exited with code {engine.wait()} before it was ready")
            return 3
        try:
            listeners = _listen(settings, n)
        except OSError as e:
            _say(f"error: cannot listen on {settings.host}:{settings.port}: {e}")
            _stop([engine], settings.grace_seconds)
            return 2
        beats = Heartbeats.create(beside(address, HEARTBEATS_FILE))  # where each front-end finds it

        def frontend(i: int) -> subprocess.Popen:  # slot i, on its own listening socket
            beats.rest(i)  # not watched until it serves
            fd = listeners[i].fileno()
            return _spawn(["headwise.service.server.frontend", "--fd", str(fd), "--log-level", log_level,
                           *(["--access-log"] if access_log else []), "--slot", str(i), str(n)], env, (fd,))

        def close() -> None:
            for sock in listeners:
                sock.close()

        started: dict[int, float] = {}  # when each slot's front-end was started...
        serving: dict[int, float] = {}  # ...and when it was first seen beating
        hung: set[int] = set()  # slots whose front-end was killed as hung, until it has exited
        crashes: dict[int, int] = {}
        for i in range(n):
            frontends[i] = frontend(i)
            started[i] = time.monotonic()
        _say(f"process mode: engine {engine.pid}, {n} front-end(s) on http://{settings.host}:{settings.port}")
        clock = _run_clock(address) if settings.engine_stall_s else None
        while not signals:
            time.sleep(POLL_S)
            if clock is not None and engine.poll() is None and clock.running_for() > settings.engine_stall_s:
                _say(f"error: the engine's device run has lasted {clock.running_for():.0f} s, over "
                     f"HEADWISE_ENGINE_STALL_S={settings.engine_stall_s:g}: the device is stuck; killing the engine")
                engine.kill()
                engine.wait()
            if engine.poll() is not None:
                _say(f"error: the engine process exited with code {engine.returncode}; the front-ends answer 503; "
                     "stopping (exit 3) so that the server is restarted")
                time.sleep(ENGINE_LOST_LINGER_S)
                close()
                _stop(list(frontends.values()), 5.0)
                return 3
            for i, p in frontends.items():
                if p.poll() is None:
                    silent = beats.silent_for(i)
                    if silent and i not in serving:
                        serving[i] = time.monotonic()
                    if i not in hung and (_hung(p, silent, settings.frontend_stall_s) if i in serving else
                                          _stuck_starting(p, time.monotonic() - started[i], settings.frontend_start_s)):
                        hung.add(i)
                    continue
                quick = _soon(time.monotonic(), started[i], serving.get(i), i in hung, settings.frontend_stall_s)
                what = "was killed as hung" if i in hung else f"exited with code {p.returncode}"
                crashes[i] = crashes.get(i, 0) + 1 if quick else 1
                if crashes[i] >= CRASH_LIMIT:
                    _say(f"error: front-end {p.pid} {what}, {crashes[i]} times in a row soon after starting; "
                         "stopping (exit 3)")
                    close()
                    _stop([*frontends.values(), engine], settings.grace_seconds)
                    return 3
                _say(f"front-end {p.pid} {what}; starting another")
                frontends[i] = frontend(i)  # its slot, and its socket, again
                started[i] = time.monotonic()
                serving.pop(i, None)
                hung.discard(i)
        _say("stopping: the front-ends drain, then the engine")
        close()
        codes = _stop(list(frontends.values()), settings.grace_seconds + 5.0)
        codes += _stop([engine], max(5.0, settings.grace_seconds))
        return 0 if all(stopped_cleanly(c) for c in codes) else 1
    finally:
        for p in [*frontends.values(), engine]:
            if p.poll() is None:
                p.kill()
        shutil.rmtree(work, ignore_errors=True)
