"""Head importance (Michel et al. 2019, "Are Sixteen Heads Really Better than One?"): for one
input, the effect of removing each head alone. Rows: the input with every head, then one per
(layer, head) with that head's output zeroed before W_O (service.engine.internals.Ablation):
L·H + 1 forward passes through the analytics batcher on the analysis graph, no gradients.

The effect of head (l, h): on an embedding model 1 − cos(e, e₋ₗₕ) of the sentence embeddings;
on a cross-encoder s − s₋ₗₕ, its score (the logit's sigmoid, or the logit with raw_scores)
with every head minus its score without that one."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass

import numpy as np

from headwise.service.engine.analytics.cosine import cosine
from headwise.service.engine.analytics.lane import AnalyticsLane
from headwise.service.engine.budget import work
from headwise.service.engine.internals import Ablation
from headwise.service.engine.params import Embedded, RequestParams
from headwise.service.engine.runtime import Analyser
from headwise.service.engine.tokenizer import Encoded
from headwise.service.errors import TooLarge


@dataclass(frozen=True)
class Importance:
    model: str
    version: str
    encoding: Encoded
    effects: np.ndarray  # [L, H] float64
    measure: str  # "cosine" (1 − cos of embeddings) | "score" (score with the head − without it)
    baseline: float | None  # the cross-encoder's score with every head; None for embeddings

    @property
    def forward_passes(self) -> int:
        return self.effects.size + 1

    def top(self, k: int) -> list[dict]:
        """The k largest effects, largest first (ties: lower layer, then lower head)."""
        flat = self.effects.ravel()
        order = sorted(range(flat.size), key=lambda i: (-flat[i], i))[:k]
        n_heads = self.effects.shape[1]
        return [{"layer": i // n_heads, "head": i % n_heads, "effect": float(flat[i])} for i in order]


def single_heads(n_layers: int, n_heads: int) -> list[Ablation]:
    """One Ablation per head, layer-major: (0, 0), (0, 1), ..."""
    return [Ablation(((layer, (head,)),)) for layer in range(n_layers) for head in range(n_heads)]


async def head_importance(rt: Analyser, enc: Encoded, params: RequestParams, max_rows: int,
                          lane: AnalyticsLane, is_disconnected: Callable[[], Awaitable[bool]] | None = None
                          ) -> Importance:
    """enc: the input (a text, or a pair for a cross-encoder), tokenised and checked; its
    L·H + 1 rows go through the analytics batcher as one job, admitted at rows · T tokens of
    the analysis graph (budget.work)."""
    n_layers, n_heads = rt.package.n_layers, rt.package.n_heads
    rows, t = n_layers * n_heads + 1, enc.length
    if rows > max_rows:
        raise TooLarge(f"head importance runs {rows} forward passes (layers × heads + 1), over the {max_rows} "
                       "inputs one request may ask for (HEADWISE_MAX_CLIENT_BATCH)")
    with lane.budget.admit(work(rows, t, "analysis"), f"head importance of {t} tokens ({rows} rows of {t})").held():
        data = await rt.run_encoded([enc] * rows, params, is_disconnected=is_disconnected,
                                    ablations=[None, *single_heads(n_layers, n_heads)])
        effects, measure, baseline = await lane.run(_effects, data)
    rt.series.analytic("head_importance").inc()
    return Importance(rt.name, rt.package.version, enc, effects.reshape(n_layers, n_heads), measure, baseline)


def _effects(data: list) -> tuple[np.ndarray, str, float | None]:
    full = data[0]
    if isinstance(full, Embedded):
        return np.array([1.0 - cosine(full.sentence, d.sentence) for d in data[1:]]), "cosine", None
    score = float(full.scores[0])
    return np.array([score - float(d.scores[0]) for d in data[1:]]), "score", score
