"""What an answer holds, counted but not priced: the engine knows how many values, tokens and
labels an answer will carry before it runs anything, and the writer of each protocol knows how
many bytes each takes in its format (service.api.sizes prices JSON). The engine asks a
`Measure` given to it at start-up, so a request whose answer could not be sent is refused
before any inference is spent. The bottom of the engine's imports: it imports none of its modules."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol


@dataclass(frozen=True, slots=True)
class Block:
    """An array written in the client's dtype and encoding (attention weights, hidden states)."""

    values: int
    dtype: str = "float32"
    encoding: str = "json"
    indices: int = 0  # top-k's int32 index beside each value
    rows: int = 0  # rows of a framed array ({shape, data} per generation step); 0: not framed


class Size:
    """Counts of what an answer carries; never changed once made. Made for every request on the
    served path, so a plain slotted class: cheaper to make than a frozen dataclass."""

    __slots__ = ("blocks", "chars", "indices", "labels", "records", "tokens", "values")

    def __init__(self, values: int = 0, indices: int = 0, tokens: int = 0, chars: int = 0, labels: int = 0,
                 records: int = 0, blocks: tuple[Block, ...] = ()):
        self.values = values  # float values written one by one: vectors, scores, logits
        self.indices = indices  # integers written one by one: a pair token's positions, a unit's token indices
        self.tokens = tokens  # tokens written with their string and offsets
        self.chars = chars  # characters of labels, echoed texts and names
        self.labels = labels  # (label, score) entries
        self.records = records  # other keyed objects: an input's answer, a tagged token, a top pair, a step
        self.blocks = blocks

    def __repr__(self) -> str:
        return "Size(" + ", ".join(f"{k}={getattr(self, k)!r}" for k in self.__slots__) + ")"

    def __add__(self, other: Size) -> Size:
        return Size(self.values + other.values, self.indices + other.indices, self.tokens + other.tokens,
                    self.chars + other.chars, self.labels + other.labels, self.records + other.records,
                    self.blocks + other.blocks)



def total(sizes) -> Size:
    """The sum of `sizes`, made once (adding them in turn would copy the blocks again each time)."""
    sizes = list(sizes)
    return Size(sum(s.values for s in sizes), sum(s.indices for s in sizes), sum(s.tokens for s in sizes),
                sum(s.chars for s in sizes), sum(s.labels for s in sizes), sum(s.records for s in sizes),
                tuple(b for s in sizes for b in s.blocks))


class Measure(Protocol):
    """A protocol writer's price of a Size (service.api.sizes.JSON)."""

    def bytes(self, size: Size) -> int: ...

    # the bytes, or TooLarge naming HEADWISE_MAX_RESPONSE_BYTES and `advice` when over `cap`
    def check(self, size: Size, cap: int, advice: str) -> int: ...
