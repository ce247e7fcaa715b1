"""A/B of `headwise bench` between two checkouts: runs alternate (before, after, before, ...)
in one sitting, each tree running its own code, and the report holds every headwise cell's
throughput and its ratio to the in-process ceiling measured in the same run.

    python -m bench.ab_quick --models /tmp/models --pairs 3 before=/tmp/hw-29dc194 after=/tmp/hw-head \\
        -- --quick --suites ceiling,http --calm 2 --retry-disturbed 1

TREE is a checkout; `python -m headwise.cli bench` runs there (its own .venv when it has one,
else this interpreter, with the tree first on the path). Arguments after `--` go to every
`headwise bench`. `--compare` re-reads runs already made (their .raw.json) instead.
A cell's figure per run is that run's median over repetitions; per side, the median of runs.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from pathlib import Path

from bench.alternate import alternate
from bench.cells import ceiling_for
from bench.report import rows_from_json
from bench.server import clean_env, python_of
from bench.stats import median

LOSS = 0.03  # the most a cell may lose (issue 28)


def run_bench(name: str, tree: Path, models: str, out: Path, extra: list[str]) -> Path:
    stem = f"ab-{name}"
    argv = [python_of(tree), "-m", "headwise.cli", "bench", "--models", models, "--out", str(out),
            "--name", stem, *extra]
    env = clean_env({"PYTHONPATH": str(tree)})
    print(f"[{time.strftime('%H:%M:%S')}] {name}: {' '.join(argv)} (in {tree})", flush=True)
    subprocess.run(argv, cwd=tree, env=env, check=True, stdout=subprocess.DEVNULL)
    return out / f"{stem}.raw.json"


def cells(raw: Path) -> dict[tuple, tuple[float, float, float]]:
    """(variant, tokens, clients) → (headwise inputs/s, headwise / ceiling, server CPU µs per
    input) of one run."""
    data = json.loads(raw.read_text())
    if not isinstance(data, dict):
        raise SystemExit(f"{raw}: a partial run (it stopped early, or is still running)")
    rows = rows_from_json(data["rows"])
    out = {}
    for r in rows:
        if r.suite == "headwise" and r.samples:
            ceil = ceiling_for(rows, r)
            ratio = r.med("throughput") / ceil.med("throughput") if ceil else float("nan")
            out[(r.variant, r.tokens, r.concurrency)] = (r.med("throughput"), ratio,
                                                         r.med_extra("server_cpu_us_per_input"))
    return out


def table(header: list[str], rows: list[list]) -> str:
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    return "\n".join(lines + ["| " + " | ".join(str(c) for c in r) + " |" for r in rows])


def compare(before: list[Path], after: list[Path]) -> tuple[str, list[str]]:
    b = [cells(p) for p in before]
    a = [cells(p) for p in after]
    rows, losses = [], []
    for key in sorted(set().union(*b) & set().union(*a), key=lambda k: (k[1], k[0], k[2] or 0)):
        bt = median(c[key][0] for c in b if key in c)
        at = median(c[key][0] for c in a if key in c)
        br = median(c[key][1] for c in b if key in c)
        ar = median(c[key][1] for c in a if key in c)
        bc = median(c[key][2] for c in b if key in c)
        ac = median(c[key][2] for c in a if key in c)
        change, change_r = at / bt - 1, ar / br - 1
        if min(change, change_r) < -LOSS:
            losses.append(f"{key}: inputs/s {change:+.1%}, share of ceiling {change_r:+.1%}")
        rows.append([key[0], key[1], key[2],
                     " / ".join(f"{c[key][0]:.0f}" for c in b if key in c), f"{bt:.0f}",
                     " / ".join(f"{c[key][0]:.0f}" for c in a if key in c), f"{at:.0f}", f"{change:+.1%}",
                     f"{br:.0%}", f"{ar:.0%}", f"{change_r:+.1%}", f"{bc:.0f}", f"{ac:.0f}", f"{ac / bc - 1:+.1%}"])
    text = table(["variant", "tokens", "clients", "before runs (inputs/s)", "before",
                            "after runs", "after", "Δ inputs/s", "before / ceiling", "after / ceiling",
                            "Δ share", "before CPU µs/input", "after CPU µs/input", "Δ CPU"], rows)
    return text, losses


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("sides", nargs="*", help="before=TREE after=TREE")
    ap.add_argument("--models", default="models")
    ap.add_argument("--pairs", type=int, default=3)
    ap.add_argument("--out", type=Path, default=Path("/tmp/headwise-ab"))
    ap.add_argument("--compare", nargs=2, metavar=("BEFORE_GLOB", "AFTER_GLOB"),
                    help="compare runs already made, e.g. '/tmp/headwise-ab/ab-before-*.raw.json'")
    argv = sys.argv[1:]
    extra = argv[argv.index("--") + 1:] if "--" in argv else []
    a = ap.parse_args(argv[:argv.index("--")] if "--" in argv else argv)
    if a.compare:
        before, after = (sorted(Path("/").glob(g.lstrip("/"))) for g in a.compare)
    else:
        trees = dict(s.split("=", 1) for s in a.sides)
        a.out.mkdir(parents=True, exist_ok=True)
        runs = alternate(["before", "after"], a.pairs, lambda side, rep: run_bench(
            f"{side}-{rep + 1}", Path(trees[side]).resolve(), a.models, a.out, extra), order="same")
        before, after = runs["before"], runs["after"]
    text, losses = compare(before, after)
    from headwise.export.cpu import label

    print(f"CPU: {label()}; {len(before)} runs each side, alternating\n")
    print(text)
    print("\ncells losing more than 3%: " + ("; ".join(losses) if losses else "none"))


if __name__ == "__main__":
    main()
