"""Issue 8, soak in its 60-second form: bench/soak.py against a real server (the 10-minute
run is `python -m bench.soak --minutes 10`). No failed request, RSS growth < 5% over the second
half, last-window p99 <= 2x the first window's: those two verdicts are bench.soak's own; here
the bounds are 25% and 4x, so that only a runaway trend fails a test (house rule 3)."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from tests.e2e.conftest import REPO

pytestmark = [pytest.mark.slow, pytest.mark.timeout(300)]


def test_soak_60_seconds(start_server):
    srv = start_server(env={"HEADWISE_PRECISION": "fp32"})
    r = subprocess.run([sys.executable, "-m", "bench.soak", "--seconds", "60", "--url", srv.url,
                        "--pid", str(srv.proc.pid)], cwd=REPO, capture_output=True, text=True, timeout=240)
    assert r.stdout.strip(), r.stderr[-3000:]
    result = json.loads(r.stdout)
    print("\nsoak 60 s:", json.dumps(result))
    assert result["requests"] > 0 and result["errors"] == 0, result
    # onnxruntime's CPU arena grows in power-of-two steps as new batch shapes arrive, so within
    # 60 s of mixed traffic one late step can be a large share, while the 10-minute soak
    # plateaus (figures: bench/results/reliability-cpu.md). A per-request leak still shows here.
    assert result["rss_growth_second_half"] < 0.25, result
    # The <= 2x criterion is bench.soak's own verdict (a timing, on a calm machine); on CI's 2
    # shared cores only a runaway trend fails here.
    assert result["p99_ratio"] <= 4.0, result
    assert "Traceback" not in srv.log_tail(10_000_000)
    srv.stop()
