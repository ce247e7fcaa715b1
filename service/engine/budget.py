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

from service.errors import Overloaded, TooLarge


class ResponseBudget:
    """`gauge`: where `used` is shown (headwise_response_bytes_inflight), if anywhere."""

    def __init__(self, limit: int, gauge=None):
        self.limit = limit
        self.used = 0
        self._gauge = gauge

    def reserve(self, n: int) -> Reservation:
        if n > 0 and self.used + n > self.limit:
            raise Overloaded(f"responses being sent take {self.used} of {self.limit} bytes; this one needs {n}")
        self._add(n)
        return Reservation(self, n)

    def _add(self, n: int) -> None:
        self.used += n
        if self._gauge is not None:
            self._gauge.set(self.used)


class Reservation:
    """Held until `release` (idempotent): by a BudgetedResponse once it has been sent. As a
    context manager, released when its block raises (the answer will never be sent)."""

    def __init__(self, budget: ResponseBudget, n: int):
        self._budget, self.n = budget, n

    def release(self) -> None:
        if self.n:
            self._budget._add(-self.n)
            self.n = 0

    @contextlib.contextmanager
    def held(self):
        """Held for the block, released when it ends however it ends."""
        try:
            yield self
        finally:
            self.release()

    def __enter__(self) -> Reservation:
        return self

    def __exit__(self, exc_type, exc, tb) -> None:
        if exc_type is not None:
            self.release()


class TokenBudget(ResponseBudget):
    """The process-wide budget of analytics work admitted and not yet run
    (HEADWISE_ANALYTICS_TOKENS_INFLIGHT), in tokens: a request's forward-pass rows × their
    tokens, charged when it is admitted and given back when its rows have run.

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

    def _add(self, n: int) -> None:
        if n < 0:  # tokens given back: they ran in the busy time since the last mark
            now = self._clock()
            took = now - self._mark
            if took > 0:
                sample = -n / took
                self.rate = sample if self.rate is None else (
                    (1 - self.RATE_WEIGHT) * self.rate + self.RATE_WEIGHT * sample)
            self._mark = now
        super()._add(n)
