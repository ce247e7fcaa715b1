"""Command-line values the benchmarks share: comma lists and KEY=VALUE settings."""

from __future__ import annotations

from collections.abc import Iterable


def ints(s: str) -> list[int]:
    """"1,16,64" → [1, 16, 64]."""
    return [int(x) for x in s.split(",") if x.strip()]


def strs(s: str) -> list[str]:
    """"fp32, int8" → ["fp32", "int8"]."""
    return [x.strip() for x in s.split(",") if x.strip()]


def key_values(pairs: Iterable[str]) -> dict[str, str]:
    """["KEY=VALUE", ...] → {KEY: VALUE} (a value may hold "=")."""
    return dict(kv.split("=", 1) for kv in pairs if kv)
