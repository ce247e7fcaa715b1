"""bench/plain_path.py runs against the service's current request path (a few requests on the
tiny package), in a sitting and as the A/B's child; no timing is asserted."""

import json
import subprocess
import sys
from argparse import Namespace
from pathlib import Path

import uvloop

from bench import plain_path

REPO = Path(__file__).resolve().parents[3]


def test_a_sitting_answers_every_request_in_batches(tiny_package):
    a = Namespace(models=str(tiny_package), clients=4, requests=16, blocks=2, profile=None, instr=False)
    r = uvloop.run(plain_path.sitting(a))
    assert len(r["blocks"]) == 2 and all(b > 0 for b in r["blocks"])
    assert r["mean_batch"] >= 1 and r["headwise"] == str(REPO / "headwise")
    body = json.loads(r["answer"])
    assert len(body["data"]) == 1 and "x-total-time" in r["headers"] and "content-length" in r["headers"]


def test_the_ab_compares_two_trees_block_by_block(tiny_package):
    out = subprocess.run([sys.executable, str(REPO / "bench" / "plain_path.py"), "--models", str(tiny_package),
                          f"a={REPO}", f"b={REPO}", "--rounds", "2", "--requests", "8", "--clients", "4"],
                         capture_output=True, text=True, timeout=300, check=True).stdout
    rows = [line for line in out.splitlines() if line.startswith("| a |") or line.startswith("| b |")]
    assert len(rows) == 2 and all("same body, 11 headers" in r for r in rows), out
