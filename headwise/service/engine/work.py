"""What the batcher queues and hands to the engine: a request (`Job`), one input of it
(`Entry`), what tokenising a job came to (`Outcome`), the next hop (`Work`), a hop's outcome
(`Done`), where the batcher's hop stands (`Phase`), and the limits a batch is cut by (`Limits`,
`length_buckets`).
service.engine.batching re-exports all but `Outcome` and `length_buckets`."""

from __future__ import annotations

import asyncio
import enum
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field

import numpy as np

from headwise.service.engine.internals import Ablation
from headwise.service.engine.params import RequestParams
from headwise.service.engine.stats import Timing
from headwise.service.engine.tokenizer import Encoded

# A request's inputs as its head takes them: texts, (a, b) pairs, or token-id lists.
Inputs = list[str] | list[str | tuple[str, str]] | list[list[int]]


def length_buckets(max_len: int) -> list[int]:
    """8, 12, 16, 24, 32, 48, 64, 96, 128, 192, 256, ... up to max_len (always included):
    padding costs at most half an input, and a 9-12 token sentence pays none beyond 12."""
    out, p = [], 8
    while p < max_len:
        out.append(p)
        if p + p // 2 < max_len:
            out.append(p + p // 2)
        p *= 2
    return [*out, max_len]


class Phase(enum.Enum):
    """Where the hop stands (tokenising beside it, with overlap, is `Batcher._tokenizing`)."""

    WAITING = "waiting"  # no hop in hand: waiting for work, gathering clients, giving way
    CHECKING = "checking"  # a hop's jobs in hand, their clients asked whether they are still there
    RUNNING = "running"  # a hop on the inference thread, until `finish`
    CUT = "cut"  # the last hop queued entries without running them: the next cuts a batch at once


@dataclass(eq=False, slots=True)
class Job:
    """One client request: its entries' results and the future the handler awaits."""

    size: int  # inputs
    inputs: Inputs | None = None  # as sent, for `prepare` (None: entries made by the caller)
    params: RequestParams | None = None
    inputs_field: str = "inputs"  # the request field `inputs` are, as errors about one of them name it
    is_disconnected: Callable[[], Awaitable[bool]] | None = None
    future: asyncio.Future | None = None
    results: list = field(default_factory=list)
    left: int = 0
    enqueued_at: float = 0.0
    answer_bytes: int = 0  # what its answer takes as the engine's Measure writes it, checked once when tokenised
    timing: Timing = field(default_factory=Timing)
    trace: object = None  # the request's span context when tracing (service.tracing)

    @property
    def done(self) -> bool:
        return self.future is None or self.future.done()

    def expect(self, n: int) -> None:
        """Make room for n results (one per entry) before any is delivered."""
        self.results = [None] * n
        self.left = n


@dataclass(eq=False, slots=True)
class Entry:
    job: Job
    index: int
    ids: np.ndarray
    type_ids: np.ndarray
    encoding: Encoded | None = None  # what the ids came from, handed back with the result
    holes: tuple[int, ...] = ()  # positions whose attention_mask is 0 (occlusion)
    ablate: Ablation | None = None  # this entry's removed heads, over its job's (head importance)
    length: int = field(init=False)  # len(ids): read at every cut, so kept rather than counted

    def __post_init__(self) -> None:
        self.length = len(self.ids)


# What tokenising one job came to: its entries, or the client error that ends it.
Outcome = list[Entry] | BaseException


@dataclass(eq=False, slots=True)
class Work:
    """The next hop: tokenise `jobs` (with `run`, and run them at once when they fit one
    batch: `Batcher.plan`), or run `batch` padded to `padded`."""

    jobs: list[Job]
    batch: list[Entry]
    padded: int = 0
    run: bool = False


@dataclass(eq=False, slots=True)
class Done:
    """A hop's outcome. `outcome`: per job of work.jobs its entries, or the exception that ends
    it; `batch`: what ran (None: nothing ran, the entries are to be queued); `results`: one per
    entry of `batch`, or the exception that failed the whole batch."""

    outcome: Sequence[Outcome] | None
    batch: list[Entry] | None
    results: Sequence | Exception | None


@dataclass
class Limits:
    max_batch_tokens: int
    max_batch_size: int
    max_wait_s: float
    max_queue: int
    # attention's B·L·H·T² memory per batch: count × cell_bytes × padded² ≤ budget_bytes (0: no cap)
    cell_bytes: int = 0
    budget_bytes: int = 0

    def max_rows(self, padded: int) -> int:
        """The most inputs of `padded` tokens one batch may hold under these limits (at least 1)."""
        rows = min(self.max_batch_size, self.max_batch_tokens // padded)
        if self.cell_bytes:
            rows = min(rows, self.budget_bytes // (self.cell_bytes * padded * padded))
        return max(1, rows)
