"""The framework versions `fastpath` and `http_protocol` were written for.

Both read private internals (FastAPI's `APIRoute.dependant`, Starlette's `scope["route"]`,
uvicorn's protocol and request cycle), which another version may rename or change. They are
used only where every one of these versions is installed; tests/unit/service/server pins them
against what constraints.txt installs, so an upgrade fails there first.
"""

from __future__ import annotations

from importlib.metadata import PackageNotFoundError, version

WRITTEN_FOR = {"fastapi": "0.165.0", "starlette": "1.10.0", "uvicorn": "0.54.0", "httptools": "0.9.0"}


def installed() -> dict[str, str | None]:
    found: dict[str, str | None] = {}
    for name in WRITTEN_FOR:
        try:
            found[name] = version(name)
        except PackageNotFoundError:
            found[name] = None
    return found


def mismatches() -> dict[str, str | None]:
    """{name: installed version} for each framework whose version is not the one written for."""
    return {name: v for name, v in installed().items() if v != WRITTEN_FOR[name]}


def fallback_warning(wrong: dict[str, str | None]) -> str:
    got = ", ".join(f"{name} {v or 'missing'} (written for {WRITTEN_FOR[name]})" for name, v in wrong.items())
    return (f"the fast path and the bounded HTTP protocol were written for other framework "
            f"versions: {got}. Serving the plain FastAPI app on uvicorn's own httptools protocol: the same "
            "answers, more CPU per request, and no request-head limits or read timeouts "
            "(HEADWISE_MAX_HEAD_BYTES, HEADWISE_MAX_HEADERS, HEADWISE_HEAD_TIMEOUT_S, HEADWISE_BODY_TIMEOUT_S, "
            "HEADWISE_MAX_CONNECTIONS). Install the versions in constraints.txt for both.")
