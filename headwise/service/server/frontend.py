"""A front-end process of process mode (docs/architecture.md#process-mode), started by the
supervisor as `python -m headwise.service.server.frontend --fd N`: the whole app (HTTP,
validation, tokenisation, batching, budgets, answers) on the listening socket it inherits,
whose backends are the engine process's (service.backends.remote). It imports no onnxruntime
and opens no device. When the engine process dies it turns not ready and answers 503. While it
serves, its event loop beats in its slot's heartbeat cell, so that the supervisor can restart it
should it hang (HEADWISE_FRONTEND_STALL_S); and until every sibling has beaten once, its
readiness probes say not ready, so that clients come once all serve (each has its share of the
connections from the start)."""

from __future__ import annotations

import argparse
import os
import socket
import sys

from headwise.service.backends.queues import HEARTBEATS_FILE, Heartbeats, beside
from headwise.service.backends.remote import EngineLink
from headwise.service.logs import say
from headwise.service.package import PackageError
from headwise.service.server.serve import ExitSignals, _exit_if_stuck, uvicorn_options
from headwise.service.settings import load_settings


def serve(fd: int, log_level: str, access_log: bool, slot: tuple[int, int] | None = None) -> int:
    settings = load_settings()
    try:
        # the engine answers hello between device runs (and lazy graph loads): wait as long as
        # the supervisor lets a front-end start
        link = EngineLink(settings.engine_address, slot=slot, connect_timeout_s=max(30.0, settings.frontend_start_s))
    except PackageError as e:
        say(f"error: {e}", who="headwise front-end")
        return 3
    import uvicorn

    from headwise.service.api.app import create_app

    signals = ExitSignals()  # one that comes while the app is made still stops it
    options, fast = uvicorn_options(settings, log_level, access_log)

    def stop() -> None:
        server.should_exit = True

    app = create_app(settings, backend_factory=link.backend, on_fatal=stop, ready_before_serving=True,
                     settle_heap=True)
    engine = app.state.engine

    def engine_lost(why: str) -> None:
        engine.failed = why
        engine.ready = False

    link.on_lost(engine_lost)
    beats = _heartbeats(settings.engine_address) if slot is not None else None
    if beats is not None:
        engine.waiting_for = Siblings(beats, *slot).starting
    served = app
    if fast:
        from headwise.service.server import fastpath

        served = fastpath.Entry(fastpath.install(app))
    config = uvicorn.Config(served, **options)
    server = _beating(beats, slot[0])(config) if beats is not None else uvicorn.Server(config)
    signals.run(server, sockets=[socket.socket(fileno=fd)])
    code = 3 if (not server.started and not signals.got) or engine.failed else 0
    link.close()
    _exit_if_stuck(code)
    return code


def _heartbeats(address: str | None) -> Heartbeats | None:
    """The supervisor's heartbeat cells (None when none were made: a front-end not started by it)."""
    path = beside(address or "", HEARTBEATS_FILE)
    return Heartbeats(path) if path and os.path.exists(path) else None


class Siblings:
    """Whether the server's other front-ends have begun to serve (each has beaten once): until
    they all have, the kernel still gives a starting one its share of new connections, which
    would wait. Once seen, it holds: a sibling restarted later does not turn the whole server
    not ready (its share waits a second or two, as a crash's would)."""

    def __init__(self, beats: Heartbeats, slot: int, slots: int):
        self.beats, self.slot, self.slots = beats, slot, slots
        self.all_served = slots <= 1

    def starting(self) -> str | None:
        """Why the server is not ready yet (None: it is)."""
        if self.all_served:
            return None
        waiting = [i for i in range(self.slots) if i != self.slot and not self.beats.silent_for(i)]
        if waiting:
            return f"{len(waiting)} of {self.slots} front-ends still starting"
        self.all_served = True
        return None


def _beating(beats: Heartbeats, slot: int):
    """uvicorn's Server, beating at each turn of its main loop (every 0.1 s while the event loop
    is free to run it), and resting once it stops: while it drains it is not watched."""
    import uvicorn

    class BeatingServer(uvicorn.Server):
        async def on_tick(self, counter: int) -> bool:
            stop = await super().on_tick(counter)
            if stop:
                beats.rest(slot)
            else:
                beats.beat(slot)
            return stop

    return BeatingServer


def main() -> None:
    parser = argparse.ArgumentParser(prog="headwise-frontend")
    parser.add_argument("--fd", type=int, required=True, help="the listening socket, inherited")
    parser.add_argument("--log-level", default="info")
    parser.add_argument("--access-log", action="store_true")
    parser.add_argument("--slot", type=int, nargs=2, metavar=("I", "N"),
                        help="front-end I of N (its column of the engine's queue table)")
    args = parser.parse_args()
    sys.exit(serve(args.fd, args.log_level, args.access_log, tuple(args.slot) if args.slot else None))


if __name__ == "__main__":
    main()
