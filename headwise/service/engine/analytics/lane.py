"""The analytics' own lane beside a runtime's batchers: their token budget, their share of the
in-flight response bytes, and a thread of the lowest priority for their post-processing and
answers (docs/analytics.md: admission and priority)."""

from __future__ import annotations

import asyncio
from collections.abc import Callable

from headwise.service.cpu import ANALYTICS_NICENESS, lowered_thread
from headwise.service.engine.budget import ShareOf, TokenBudget


class AnalyticsLane:
    """What analytics need of the engine beside a runtime: the token budget they are admitted
    against, and a thread of the lowest priority for their post-processing and responses
    (`run`), so that none of it runs on the event loop."""

    def __init__(self, budget: TokenBudget, responses: ShareOf):
        self.budget = budget
        self.responses = responses  # what analytics answers may hold of the in-flight response bytes
        self.pool = lowered_thread("headwise-analytics-post", ANALYTICS_NICENESS)

    async def run(self, fn: Callable, *args):
        return await asyncio.get_running_loop().run_in_executor(self.pool, fn, *args)

    def close(self) -> None:
        self.pool.shutdown(wait=False, cancel_futures=True)
