"""The analytics admission arithmetic (TokenBudget): 413 over the per-request cap, 429 over the
tokens in flight with a Retry-After from the rate at which admitted work finished."""

import pytest

from headwise.service.engine.budget import TokenBudget
from headwise.service.errors import Overloaded, TooLarge


class Clock:
    def __init__(self):
        self.now = 100.0

    def __call__(self):
        return self.now


class Gauge:
    value = None

    def set(self, v):
        self.value = v


def test_admit_charges_and_release_gives_back():
    g = Gauge()
    b = TokenBudget(1000, 600, g)
    r1 = b.admit(600, "a")
    r2 = b.admit(400, "b")
    assert b.used == 1000 and g.value == 1000
    r1.release()
    r1.release()  # idempotent
    assert b.used == 400 and g.value == 400
    r2.release()
    assert b.used == 0 and g.value == 0


def test_a_request_over_the_cap_is_too_large_whatever_is_in_flight():
    b = TokenBudget(1000, 600)
    with pytest.raises(TooLarge, match=r"601 tokens.*HEADWISE_ANALYTICS_MAX_REQUEST_TOKENS"):
        b.admit(601, "occlusion")
    assert b.used == 0


def test_a_request_that_does_not_fit_now_is_overloaded_with_an_estimated_retry():
    clock = Clock()
    b = TokenBudget(1000, 1000, clock=clock)
    first = b.admit(800, "a")
    with pytest.raises(Overloaded) as e:
        b.admit(300, "b")
    assert e.value.retry_after == 1  # no rate known yet
    assert "800 of 1000" in e.value.message and "HEADWISE_ANALYTICS_TOKENS_INFLIGHT" in e.value.message
    clock.now += 4.0  # 800 tokens ran in 4 s of busy time: 200 tokens/s
    first.release()
    assert b.rate == pytest.approx(200)
    held = b.admit(900, "c")
    with pytest.raises(Overloaded) as e:
        b.admit(500, "d")  # 400 tokens over: 2 s at 200 tokens/s
    assert e.value.retry_after == 2
    held.release()


def test_the_rate_counts_busy_time_only():
    clock = Clock()
    b = TokenBudget(1000, 1000, clock=clock)
    b.admit(100, "a").release()  # no time passed: no sample
    clock.now += 1000  # idle: not counted
    r = b.admit(500, "b")
    clock.now += 1.0
    r.release()
    assert b.rate == pytest.approx(500)


def test_held_releases_however_the_block_ends():
    b = TokenBudget(1000, 1000)
    with pytest.raises(RuntimeError), b.admit(300, "a").held():
        assert b.used == 300
        raise RuntimeError
    assert b.used == 0
    with b.admit(300, "a").held():
        pass
    assert b.used == 0


def test_a_request_that_failed_gives_its_tokens_back_without_a_rate_sample():
    clock = Clock()
    b = TokenBudget(1000, 1000, clock=clock)
    with pytest.raises(ConnectionError), b.admit(500, "a").held():
        clock.now += 0.001  # refused by its queue at once: 500 tokens in a millisecond ran nowhere
        raise ConnectionError
    assert b.used == 0 and b.rate is None


def test_a_share_holds_at_most_its_limit_and_leaves_the_rest_to_others():
    from headwise.service.engine.budget import ResponseBudget, ShareOf

    whole = ResponseBudget(100)
    share = ShareOf(whole, 60, "analytics answers being built or sent")
    a = share.reserve(50)
    with pytest.raises(Overloaded, match="analytics answers being built or sent take 50 of 60"):
        share.reserve(20)
    assert whole.used == 50 and share.share.used == 50
    other = whole.reserve(45)  # plain answers keep the rest
    with pytest.raises(Overloaded):
        share.reserve(10)  # fits the share, not the whole: nothing held by the attempt
    assert whole.used == 95 and share.share.used == 50
    a.release()
    other.release()
    assert whole.used == 0 and share.share.used == 0


def test_work_is_rows_times_tokens_times_the_graphs_weight():
    """Issue 40, item 6: the budget counts work, rows × tokens × the weight of the graph they run
    on (bench/results/analytics-weights.md: the analysis graph's rows took the fast graph's time
    per row-token at the longest inputs, within noise: both weigh 1)."""
    from headwise.service.engine.budget import GRAPH_WEIGHTS, work

    assert GRAPH_WEIGHTS == {"fast": 1, "analysis": 1}
    assert work(73, 256, "analysis") == 18_688  # MiniLM's head importance of 256 tokens
    assert work(256, 255, "analysis") == 65_280  # its largest occlusion
    assert sum(work(1, 256, "fast") for _ in range(256)) == 65_536  # its largest similarity
    with pytest.raises(KeyError):
        work(1, 1, "attention")
