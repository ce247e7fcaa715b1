"""What cutting a pair by choosing its tokens saves against encoding it again with the
tokenizer's own longest_first truncation (whose overflow keeps every combination of the two
sides' leftover pieces): CPU time and peak memory of `TextTokenizer.encode_items` on pairs.

    python -m bench.experiments.pair_truncation before=/tmp/ab-base after=. \
        --reps 5 --out bench/results/pair-truncation.md

Each side is a tree whose `headwise` is imported in a child process of its own, one per shape
and repetition (so each peak RSS is that shape's alone); the sides take turns
(bench.alternate). The tokenizer is the bundled all-MiniLM-L6-v2's at max_len 256. A child
encodes its shape `--calls` times and reports the median wall time of one call.
"""

from __future__ import annotations

import argparse
import json
import shlex
import subprocess
import sys
from pathlib import Path

from bench.alternate import turns
from bench.facts import machine_facts
from bench.stats import median

WORDS = ["cat", "dog", "house", "river", "quantum", "elephant", "blue", "seventeen", "naïve", "café"]
# name: (pairs in one call, words in the first text, words in the second)
SHAPES = {"rerank 32 × (8, 150 words)": (32, 8, 150), "one pair (2,000, 2,000)": (1, 2000, 2000),
          "one pair (5,000, 5,000)": (1, 5000, 5000), "one pair (12,000, 12,000)": (1, 12000, 12000)}

CHILD = """
import json, random, resource, statistics, sys, time
from headwise.model.sentence import default_checkpoint
from headwise.service.engine.tokenizer import TextTokenizer
words, (n, a, b), calls = json.loads(sys.argv[1]), json.loads(sys.argv[2]), int(sys.argv[3])
rng = random.Random(0)
text = lambda k: " ".join(rng.choice(words) for _ in range(k))
pairs = [(text(a), text(b)) for _ in range(n)]
tok = TextTokenizer(default_checkpoint() / "tokenizer.json", 256)
times = []
for _ in range(calls):
    t = time.perf_counter(); tok.encode_items(pairs); times.append(time.perf_counter() - t)
print(json.dumps({"ms": statistics.median(times) * 1e3,
                  "rss_mib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024}))
"""


def run_child(tree: Path, shape: tuple[int, int, int], calls: int) -> dict:
    out = subprocess.run([sys.executable, "-c", CHILD, json.dumps(WORDS), json.dumps(shape), str(calls)],
                         cwd=tree, env={"PYTHONPATH": str(tree), "PATH": "/usr/bin:/bin"},
                         capture_output=True, text=True, check=True)
    return json.loads(out.stdout)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("sides", nargs=2, help="NAME=TREE")
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--calls", type=int, default=5)
    ap.add_argument("--out")
    args = ap.parse_args()
    sides = [(name, Path(tree).resolve()) for name, _, tree in (s.partition("=") for s in args.sides)]
    got: dict = {(name, shape): [] for name, _ in sides for shape in SHAPES}
    for rep, order in turns(sides, args.reps):
        for shape, spec in SHAPES.items():
            for name, tree in order:
                got[(name, shape)].append(run_child(tree, spec, args.calls))
        print(f"repetition {rep + 1} of {args.reps} done", file=sys.stderr)
    (a, _), (b, _) = sides
    lines = [f"`{shlex.join(['python', '-m', 'bench.experiments.pair_truncation', *sys.argv[1:]])}`", "",
             f"Machine: {json.dumps(machine_facts('cpu'))}", "",
             f"| shape | {a} ms | {b} ms | {b}/{a} | {a} peak RSS MiB | {b} peak RSS MiB |",
             "|---|---:|---:|---:|---:|---:|"]
    for shape in SHAPES:
        ms = [median([r["ms"] for r in got[(s, shape)]]) for s in (a, b)]
        rss = [median([r["rss_mib"] for r in got[(s, shape)]]) for s in (a, b)]
        lines.append(f"| {shape} | {ms[0]:.2f} | {ms[1]:.2f} | {ms[1] / ms[0]:.2f} | {rss[0]:.0f} | {rss[1]:.0f} |")
    report = "\n".join(lines) + "\n"
    print(report)
    if args.out:
        Path(args.out).write_text(report)


if __name__ == "__main__":
    main()
