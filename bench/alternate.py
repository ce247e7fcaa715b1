"""The A/B runner every harness shares: sides (servers, trees, layouts, candidates, cells) take
turns within each repetition, the order changing from one repetition to the next, so that a
shared machine's drift hits every side alike. Pure: nothing here times anything.

Orders, for sides A B C over three repetitions:
- "reverse" (the default): A B C, C B A, A B C;
- "rotate": A B C, B C A, C A B;
- "same": A B C every time (A B A B for two sides).
"""

from __future__ import annotations

from collections.abc import Callable, Hashable, Iterator, Sequence
from typing import Literal, TypeVar

from bench.stats import median

Order = Literal["reverse", "rotate", "same"]
S = TypeVar("S")
H = TypeVar("H", bound=Hashable)
R = TypeVar("R")


def turn(sides: Sequence[S], rep: int, order: Order = "reverse") -> list[S]:
    """The sides in repetition `rep`'s order (repetitions count from 0)."""
    sides = list(sides)
    if order == "reverse":
        return sides if rep % 2 == 0 else sides[::-1]
    if order == "rotate":
        k = rep % len(sides) if sides else 0
        return sides[k:] + sides[:k]
    if order == "same":
        return sides
    raise ValueError(f"order is reverse, rotate or same, not {order!r}")


def turns(sides: Sequence[S], reps: int, order: Order = "reverse") -> Iterator[tuple[int, list[S]]]:
    """(rep, the sides in its order) for each repetition: for loops with work of their own
    between repetitions (a ceiling measured once per repetition, a time budget checked)."""
    for rep in range(reps):
        yield rep, turn(sides, rep, order)


def alternate(sides: Sequence[H], reps: int, run_one: Callable[[H, int], R],
              order: Order = "reverse") -> dict[H, list[R]]:
    """`run_one(side, rep)` for every side in every repetition, in turn → each side's results,
    in the order of the repetitions."""
    got: dict[H, list[R]] = {s: [] for s in sides}
    for rep, now in turns(sides, reps, order):
        for side in now:
            got[side].append(run_one(side, rep))
    return got


def medians(got: dict[H, list[float]]) -> dict[H, float]:
    """Each side's median over its repetitions (nan and None left out; nan when none is left)."""
    return {side: median(xs) for side, xs in got.items()}
