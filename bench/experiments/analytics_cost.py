"""What each attention analytic costs against a plain /v1/embed request, through a real
`headwise serve` process over HTTP, one client, requests one after another: per-head
attention, head mean, rollout, similarity (one target) with and without explain, occlusion (by
token and by word), hidden states, one head ablated and head importance, at a few exact token
counts.

    python -m bench.experiments.analytics_cost PACKAGE [--tokens 20 128] [--reps 15] [--precision fp32]
    python -m bench.experiments.analytics_cost PACKAGE --tokens 128 512 --rows plain rollout  # those rows only

Prints a markdown table of medians (ms) and each row's ratio to the plain request of the same
length, with the machine's facts (bench/facts.py). Rows of occlusion run fewer repetitions
(T + 1 forward passes each).
"""

from __future__ import annotations

import argparse
import os
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import httpx

from bench.facts import load_average, machine_facts

WORDS = ["the", "cat", "sat", "on", "a", "mat", "and", "the", "dog", "ran", "in", "the", "park", "while", "it", "was", "warm"]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def serve(package: str, precision: str) -> tuple[subprocess.Popen, str, Path]:
    port = free_port()
    env = {k: v for k, v in os.environ.items() if not k.startswith("HEADWISE_")}
    env.update(HEADWISE_PROVIDER="cpu", HEADWISE_PRECISION=precision)
    log = Path(tempfile.mkstemp(prefix="analytics-cost-", suffix=".log")[1])
    with open(log, "wb") as fh:
        proc = subprocess.Popen([sys.executable, "-m", "headwise.cli", "serve", "--models", package,
                                 "--port", str(port)], env=env, stdout=fh, stderr=subprocess.STDOUT)
    url = f"http://127.0.0.1:{port}"
    for _ in range(1200):
        if proc.poll() is not None:
            raise SystemExit(f"headwise serve exited: {log.read_text()[-2000:]}")
        try:
            if httpx.get(url + "/health/ready", timeout=2).status_code == 200:
                return proc, url, log
        except httpx.TransportError:
            pass
        time.sleep(0.1)
    proc.terminate()
    raise SystemExit("server not ready in 120 s")


def text_of(client: httpx.Client, tokens: int) -> str:
    """A text of exactly `tokens` tokens, special tokens included (every word is one token)."""
    text = " ".join(WORDS[i % len(WORDS)] for i in range(tokens - 2))
    n = len(client.post("/v1/tokenize", json={"inputs": text}).json()["data"][0]["ids"])
    assert n == tokens, (n, tokens)
    return text


def median_ms(client: httpx.Client, path: str, body: dict, reps: int) -> float:
    r = client.post(path, json=body)
    r.raise_for_status()
    times = []
    for _ in range(reps):
        t0 = time.perf_counter()
        r = client.post(path, json=body)
        r.content  # noqa: B018 - read it all
        times.append(time.perf_counter() - t0)
        r.raise_for_status()
    return 1000 * statistics.median(times)


def cells(text: str, other: str) -> list[tuple[str, str, dict, int]]:
    """(row, path, body, repetition divisor)."""
    return [
        ("plain /v1/embed", "/v1/embed", {"inputs": text}, 1),
        ("attention per head (none), float16 base64", "/v1/embed",
         {"inputs": text, "attention": {"dtype": "float16", "encoding": "base64"}}, 1),
        ("attention mean, float32 json", "/v1/embed", {"inputs": text, "attention": {"aggregate": "mean"}}, 1),
        ("attention rollout, float32 json", "/v1/embed", {"inputs": text, "attention": {"aggregate": "rollout"}}, 1),
        ("attention rollout, float16 base64", "/v1/embed",
         {"inputs": text, "attention": {"aggregate": "rollout", "dtype": "float16", "encoding": "base64"}}, 1),
        ("similarity, 1 target", "/v1/similarity", {"source": text, "targets": [other]}, 1),
        ("similarity, 1 target, explain", "/v1/similarity", {"source": text, "targets": [other], "explain": True}, 1),
        ("occlusion (T + 1 passes)", "/v1/occlusion", {"input": text}, 5),
        ("occlusion by word (W + 1 passes)", "/v1/occlusion", {"input": text, "unit": "word"}, 5),
        ("hidden states, every layer, float16 base64", "/v1/embed",
         {"inputs": text, "hidden_states": {"dtype": "float16", "encoding": "base64"}}, 1),
        ("hidden states, every layer, mean pooled", "/v1/embed", {"inputs": text, "hidden_states": {"pooling": "mean"}},
         1),
        ("ablate one head", "/v1/embed", {"inputs": text, "ablate": {"3": [5]}}, 1),
        ("head importance (L·H + 1 passes)", "/v1/head_importance", {"input": text}, 5),
    ]


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(prog="python -m bench.experiments.analytics_cost")
    p.add_argument("package")
    p.add_argument("--tokens", type=int, nargs="+", default=[20, 128])
    p.add_argument("--reps", type=int, default=15)
    p.add_argument("--precision", default="fp32", choices=["fp32", "int8", "fp16"])
    p.add_argument("--rows", nargs="+", help="only the rows whose name contains one of these words "
                   "(the plain row is always run: the ratios need it)")
    args = p.parse_args(argv)
    proc, url, log = serve(args.package, args.precision)
    rows: dict[str, dict[int, float]] = {}
    try:
        with httpx.Client(base_url=url, timeout=120) as client:
            for t in args.tokens:
                text = text_of(client, t)
                other = " ".join(reversed(text.split()))
                for name, path, body, slow in cells(text, other):
                    if args.rows and name != "plain /v1/embed" and not any(w in name for w in args.rows):
                        continue
                    rows.setdefault(name, {})[t] = median_ms(client, path, body, max(3, args.reps // slow))
    finally:
        proc.terminate()
        proc.wait(30)
        log.unlink(missing_ok=True)
    facts = machine_facts("cpu")
    print(f"# analytics cost: {Path(args.package).name}, {args.precision} embed variant, one client, HTTP\n")
    for k, v in facts.items():
        print(f"- {k}: {v}")
    print(f"- load average before and after: {load_average()}")
    print(f"- repetitions: {args.reps} per cell (occlusion {max(3, args.reps // 5)}), medians\n")
    head = " | ".join(f"{t} tokens: ms | × plain" for t in args.tokens)
    print(f"| request | {head} |\n|---|" + "---|---|" * len(args.tokens))
    for name, by_t in rows.items():
        vals = " | ".join(f"{by_t[t]:.2f} | {by_t[t] / rows['plain /v1/embed'][t]:.2f}" for t in args.tokens)
        print(f"| {name} | {vals} |")


if __name__ == "__main__":
    main()
