"""The process-wide budget of response bytes being built or sent (HEADWISE_MAX_INFLIGHT_RESPONSE_BYTES).

Every request's response is counted as it will be serialised (service.engine.params.response_bytes)
from the moment its results are in until its last byte has gone to the client's connection.
A request that would take the total past the budget is turned away (Overloaded), so
that any mix of valid requests keeps the process inside its memory limit.
"""

from __future__ import annotations

from service.errors import Overloaded


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

    def __enter__(self) -> Reservation:
        return self

    def __exit__(self, exc_type, exc, tb) -> None:
        if exc_type is not None:
            self.release()
