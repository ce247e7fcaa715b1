"""The process-wide budgets: response bytes being built or sent (HEADWISE_MAX_INFLIGHT_RESPONSE_BYTES),
and analytics tokens admitted and not yet run (TokenBudget).

Every request's response is counted as it will be serialised (service.engine.params.response_bytes)
from the moment its results are in until its last byte has gone to the client's connection.
A request that would take the total past the budget is turned away (Overloaded), so
that any mix of valid requests keeps the process inside its memory limit.
"""

from __future__ import annotations

import contextlib
import math
import time

from headwise.service.errors import Overloaded, TooLarge


class ResponseBudget:
    """`gauge`: where `used` is shown (headwise_response_bytes_inflight), if anywhere; `what`:
    what it counts, for the message."""

    def __init__(self, limit: int, gauge=None, what: str = "responses being sent"):
        self.limit = limit
        self.used = 0
        self._gauge = gauge
        self._what = what

    def reserve(self, n: int) -> Reservation:
        if n > 0 and self.used + n > self.limit:
            raise Overloaded(f"{self._what} take {self.used} of {self.limit} bytes; this one needs {n}")
        self._add(n)
        return Reservation(self, n)

    def _add(self, n: int) -> None:
        self.used += n
        if self._gauge is not None:
            self._gauge.set(self.used)

    def _give_back(self, n: int, ran: bool) -> None:
        self._add(-n)


class Reservation:
    """Held until `release` (idempotent): by a BudgetedResponse once it has been sent. As a
    context manager, released when its block raises (the answer will never be sent)."""

    def __init__(self, budget: ResponseBudget, n: int):
        self._budget, self.n = budget, n

    def release(self, ran: bool = True) -> None:
        """`ran`: the work it was held for was done (False: it failed or was refused)."""
        if self.n:
            self._budget._give_back(self.n, ran)
            self.n = 0

    @contextlib.contextmanager
    def held(self):
        """Held for the block, released when it ends however it ends."""
        try:
            yield self
        except BaseException:
            self.release(ran=False)
            raise
        self.release()

    def __enter__(self) -> Reservation:
        return self

    def __exit__(self, exc_type, exc, tb) -> None:
        if exc_type is not None:
            self.release()


class ShareOf:
    """A share of a budget: `reserve(n)` holds n in the share and in the whole, so that what
    the share holds never passes its limit and the rest of the whole stays for the others
    (analytics answers, built on a thread of the lowest priority, hold at most this share of
    the in-flight response bytes)."""

    def __init__(self, whole: ResponseBudget, limit: int, what: str):
        self.whole = whole
        self.share = ResponseBudget(limit, what=what)

    def reserve(self, n: int) -> Reservation:
        mine = self.share.reserve(n)
        try:
            return Both(mine, self.whole.reserve(n))
        except BaseException:
            mine.release(ran=False)
            raise


class Both(Reservation):
    """Two reservations released together."""

    def __init__(self, a: Reservation, b: Reservation):
        self._parts = (a, b)
        self.n = b.n

    def release(self, ran: bool = True) -> None:
        for part in self._parts:
            part.release(ran)
        self.n = 0


# The analytics budget counts work: a request's forward-pass rows × their tokens × the weight
# of the graph they run on, the time one row-token takes there over one on the served fast
# graph in the analytics lane (/v1/similarity's rows). Measured at the longest inputs on CPU
# (bench/results/analytics-weights.md): the analysis graph's rows (occlusion, head importance)
# take the fast graph's time per row-token, within noise, so both weigh 1.
GRAPH_WEIGHTS = {"fast": 1, "analysis": 1}


def work(rows: int, tokens: int, graph: str) -> int:
    """What a request's rows cost the analytics budget: rows × tokens × GRAPH_WEIGHTS[graph]."""
    return rows * tokens * GRAPH_WEIGHTS[graph]


class TokenBudget(ResponseBudget):
    """The process-wide budget of analytics work admitted and not yet run
    (HEADWISE_ANALYTICS_TOKENS_INFLIGHT), in tokens: a request's forward-pass rows × their
    tokens, charged when it is admitted and given back when its work is done (its rows run and
    post-processed) or it failed.

    A request over `per_request` could never be admitted (TooLarge); one that does not fit
    beside the others now is turned away (Overloaded) with an estimate of when it would: the
    tokens that must finish first over the rate at which admitted work has been finishing."""

    RATE_WEIGHT = 0.3  # of the newest rate sample in the moving average
    MAX_RETRY_S = 600

    def __init__(self, limit: int, per_request: int, gauge=None, clock=time.monotonic):
        super().__init__(limit, gauge)
        self.per_request = per_request
        self.rate: float | None = None  # tokens finished per second of busy time
        self._clock = clock
        self._mark = 0.0  # when the budget last went busy, or last gave tokens back

    def admit(self, cost: int, what: str) -> Reservation:
        """`what`: the request's cost in words, for the messages."""
        if cost > self.per_request:
            raise TooLarge(f"{what} costs {cost} tokens (forward-pass rows × tokens), over the {self.per_request} "
                           "one analytics request may cost (HEADWISE_ANALYTICS_MAX_REQUEST_TOKENS); send a "
                           "shorter input or fewer targets")
        if self.used + cost > self.limit:
            raise Overloaded(f"analytics being run take {self.used} of {self.limit} tokens "
                             f"(HEADWISE_ANALYTICS_TOKENS_INFLIGHT); this request needs {cost}; retry later",
                             retry_after=self.retry_after(self.used + cost - self.limit))
        if self.used == 0:
            self._mark = self._clock()
        self._add(cost)
        return Reservation(self, cost)

    def retry_after(self, tokens: int) -> int:
        """Whole seconds until `tokens` more have finished at the recent rate (1 when unknown)."""
        if not self.rate:
            return 1
        return max(1, min(self.MAX_RETRY_S, math.ceil(tokens / self.rate)))

    def _give_back(self, n: int, ran: bool) -> None:
        """Tokens that ran were run in the busy time since the last mark: a rate sample. Those
        of a request that failed or was refused (its queue full, its client gone) are not."""
        if ran:
            now = self._clock()
            took = now - self._mark
            if took > 0:
                sample = n / took
                self.rate = sample if self.rate is None else (
                    (1 - self.RATE_WEIGHT) * self.rate + self.RATE_WEIGHT * sample)
            self._mark = now
        self._add(-n)
