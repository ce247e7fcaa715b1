"""Choosing the next token from logits, in numpy: greedy, or sampling with temperature,
top-k and top-p (nucleus) from a per-request `np.random.Generator`, so a fixed seed gives
the same tokens for the same logits."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

# A temperature this small is greedy decoding (vLLM's threshold too): dividing logits by a
# subnormal one overflows to inf, and the probabilities to NaN.
GREEDY_BELOW = 1e-5


@dataclass(frozen=True)
class SamplingParams:
    temperature: float = 0.0  # under GREEDY_BELOW: greedy
    top_k: int = 0  # 0: off
    top_p: float = 1.0  # 1: off

    @property
    def greedy(self) -> bool:
        return self.temperature < GREEDY_BELOW


def make_rng(seed: int | None) -> np.random.Generator:
    """A request's own generator: seeded when asked, else from the OS's entropy."""
    return np.random.default_rng(seed)


def suppress(logits: np.ndarray, ids) -> np.ndarray:
    """A copy of logits (..., V) where the banned ids can never be chosen."""
    out = np.array(logits, dtype=np.float64, copy=True)
    if len(ids):
        out[..., list(ids)] = -np.inf
    return out


def top_k_keep(logits: np.ndarray, k: int) -> np.ndarray:
    """Boolean mask (V,) of the k largest logits (exactly k; ties go to the lower id)."""
    v = logits.shape[-1]
    keep = np.zeros(v, dtype=bool)
    if k <= 0 or k >= v:
        keep[:] = True
        return keep
    order = np.argsort(-logits, kind="stable")[:k]
    keep[order] = True
    return keep


def top_p_keep(probs: np.ndarray, p: float) -> np.ndarray:
    """Boolean mask (V,) of the smallest set of most likely ids whose probabilities reach p
    (the nucleus); the most likely id is always kept."""
    keep = np.zeros(probs.shape[-1], dtype=bool)
    if p >= 1.0:
        keep[probs > 0] = True
        keep[np.argmax(probs)] = True
        return keep
    order = np.argsort(-probs, kind="stable")
    before = np.cumsum(probs[order]) - probs[order]  # mass of the ids ranked above each one
    keep[order[before < p]] = True
    keep[order[0]] = True
    return keep


def softmax(x: np.ndarray) -> np.ndarray:
    x = x - np.max(x)
    e = np.exp(x)
    return e / e.sum()


def distribution(logits: np.ndarray, params: SamplingParams) -> np.ndarray:
    """The probabilities (V,) a sampled token is drawn from (after temperature, top-k, top-p)."""
    x = np.asarray(logits, dtype=np.float64) / params.temperature
    if params.top_k > 0:
        x = np.where(top_k_keep(x, params.top_k), x, -np.inf)
    probs = softmax(x)
    if params.top_p < 1.0:
        probs = np.where(top_p_keep(probs, params.top_p), probs, 0.0)
        probs /= probs.sum()
    return probs


def pick(logits: np.ndarray, params: SamplingParams, rng: np.random.Generator) -> int:
    """One token id from one row of logits (V,), banned ids already at -inf."""
    if params.greedy:
        return int(np.argmax(logits))
    probs = distribution(logits, params)
    cdf = np.cumsum(probs)
    i = int(np.searchsorted(cdf, rng.random() * cdf[-1], side="right"))
    i = min(i, len(cdf) - 1)
    while probs[i] == 0.0 and i > 0:  # rounding at the very top of the cdf
        i -= 1
    return i
