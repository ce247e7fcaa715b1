"""bench.experiments.timing_headers runs against the service's current response path (a few answers)."""

import uvloop

from bench.experiments.timing_headers import measure


def test_timing_headers_bench_measures_both_sides():
    r = uvloop.run(measure(blocks=3, per_block=20))
    assert r["without_us"] > 0 and r["with_us"] > 0
    assert len(r["added_us_q1_q3"]) == 2
