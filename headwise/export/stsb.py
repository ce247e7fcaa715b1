"""STS Benchmark dev: the quality figure for exported models (Spearman × 100)."""

from __future__ import annotations

import csv
import os
from pathlib import Path

import numpy as np

REFERENCE_ALL_MINILM_L6_V2 = 86.72


# The STS Benchmark dev split ships inside the package (headwise/export/data/stsb: licence and citation
# in LICENSE.txt there), so every export measures quality.
BUNDLED = Path(__file__).resolve().parent / "data" / "stsb" / "sts-dev.csv"


def find_stsb(explicit: str | Path | None = None) -> Path | None:
    """--stsb FILE, else $HEADWISE_STSB, else the bundled dev split. An explicit file that does
    not exist is an error, not a silent fallback."""
    for given, what in ((explicit, "--stsb"), (os.environ.get("HEADWISE_STSB"), "HEADWISE_STSB")):
        if given:
            if not Path(given).is_file():
                raise FileNotFoundError(f"{what}: {given}: no such file")
            return Path(given)
    return BUNDLED if BUNDLED.is_file() else None


def load_pairs(path: Path) -> tuple[list[str], list[str], np.ndarray]:
    a, b, gold = [], [], []
    with open(path, newline="", encoding="utf-8") as fh:
        for row in csv.reader(fh, delimiter="\t", quoting=csv.QUOTE_NONE):
            if len(row) < 7:
                continue
            gold.append(float(row[4]))
            a.append(row[5])
            b.append(row[6])
    return a, b, np.asarray(gold)


def _rank(x: np.ndarray) -> np.ndarray:
    """Average ranks for ties (as scipy.stats.rankdata)."""
    order = np.argsort(x, kind="mergesort")
    ranks = np.empty(len(x))
    xs = x[order]
    i = 0
    while i < len(x):
        j = i
        while j + 1 < len(x) and xs[j + 1] == xs[i]:
            j += 1
        ranks[order[i : j + 1]] = (i + j) / 2.0 + 1
        i = j + 1
    return ranks


def spearman(x: np.ndarray, y: np.ndarray) -> float:
    rx, ry = _rank(np.asarray(x, float)), _rank(np.asarray(y, float))
    return float(np.corrcoef(rx, ry)[0, 1])


def sts_score(emb_a: np.ndarray, emb_b: np.ndarray, gold: np.ndarray) -> float:
    """Spearman(cosine(a, b), gold) × 100."""
    na = emb_a / np.linalg.norm(emb_a, axis=1, keepdims=True)
    nb = emb_b / np.linalg.norm(emb_b, axis=1, keepdims=True)
    return 100.0 * spearman((na * nb).sum(1), gold)
