"""What a request asks to see or change inside the model beyond attention: hidden states
(HiddenSpec: the residual stream after chosen layers) and removed heads (Ablation: a head mask
on each head's output before W_O). The package's analysis graph (export.graphs.AnalysisGraph)
serves both; requests that ask for either run in batches of their own (the encoder's
"analysis" batcher), so plain answers never share a batch with them."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np

from headwise.service.engine.size import Block
from headwise.service.engine.values import DTYPES, ascii_index, encode_array
from headwise.service.errors import Validation

POOLINGS = ("none", "mean", "cls")
KEY_SHOWN = 40  # an `ablate` key longer than this is named by its first 40 characters and "…"


@dataclass(frozen=True)
class HiddenSpec:
    """Which hidden states a request asks for: `layers` of 0..L (0 is the embeddings' output,
    i the output of layer i, as transformers' `output_hidden_states` counts them), each per
    token ([T, d_model], `none`) or pooled over the input's tokens (`mean`, or the first
    token's, `cls`: [d_model]), written in `dtype` and `encoding` as attention is."""

    layers: tuple[int, ...]
    pooling: str = "none"
    dtype: str = "float32"
    encoding: str = "json"

    @classmethod
    def select(cls, n_layers: int, layers: Sequence[int] | None, **how) -> HiddenSpec:
        """None: every layer, 0..n_layers. Raises Validation for an index out of range, an
        empty list or an index given twice."""
        if layers is None:
            return cls(tuple(range(n_layers + 1)), **how)
        if not layers or any(not 0 <= i <= n_layers for i in layers):
            raise Validation(f"hidden_states.layers: each must be in 0..{n_layers} (0: the embeddings' output) "
                             "and the list non-empty", field="hidden_states.layers")
        if len(set(layers)) != len(layers):
            raise Validation("hidden_states.layers: each index at most once", field="hidden_states.layers")
        return cls(tuple(layers), **how)

    def values(self, t: int, d_model: int) -> int:
        return len(self.layers) * (t if self.pooling == "none" else 1) * d_model

    def block(self, t: int, d_model: int) -> Block:
        """What one input of t tokens' hidden states write in the answer."""
        return Block(self.values(t, d_model), self.dtype, self.encoding)

    def payload(self, states: np.ndarray, t: int) -> dict:
        """One input's padded [L + 1, Tp, D] states → {layers, pooling, dtype, encoding, shape,
        data}: [L', T, D] per token, or [L', D] pooled."""
        a = states[list(self.layers), :t]  # (L', T, D)
        if self.pooling == "mean":
            a = a.mean(axis=1, dtype=np.float64).astype(np.float32)  # (L', D)
        elif self.pooling == "cls":
            a = a[:, 0]  # (L', D)
        a = np.ascontiguousarray(a, dtype=DTYPES[self.dtype])
        return {"layers": list(self.layers), "pooling": self.pooling, "dtype": self.dtype, "encoding": self.encoding,
                "shape": list(a.shape), "data": encode_array(a, self.encoding)}


@dataclass(frozen=True)
class Ablation:
    """Heads removed: (layer, heads) pairs in layer order. A removed head's output is zeroed
    before Concat · W_O (Michel et al. 2019, "Are Sixteen Heads Really Better than One?")."""

    heads: tuple[tuple[int, tuple[int, ...]], ...]

    @classmethod
    def select(cls, n_layers: int, n_heads: int, ablate: Mapping[str, Sequence[int]] | None) -> Ablation | None:
        """{"<layer>": [heads]} → an Ablation (None when nothing is asked). Raises Validation
        naming `ablate.<layer>` for a layer or head out of range, an empty or repeated list, and
        for a key that is not plain ASCII digits ("²", "٣", "３", "+1", "1_0" are refused)."""
        if not ablate:
            return None
        out = {}
        for key, heads in ablate.items():
            field = f"ablate.{key if len(key) <= KEY_SHOWN else key[:KEY_SHOWN] + '…'}"
            layer = ascii_index(key, n_layers)
            if layer is None:
                raise Validation(f"{field}: a layer must be in 0..{n_layers - 1}, in ASCII digits", field=field)
            if not heads or any(not 0 <= h < n_heads for h in heads):
                raise Validation(f"{field}: each head must be in 0..{n_heads - 1} and the list non-empty", field=field)
            if len(set(heads)) != len(heads):
                raise Validation(f"{field}: each head at most once", field=field)
            if layer in out:
                raise Validation(f"{field}: layer {layer} given twice", field=field)
            out[layer] = tuple(sorted(heads))
        return cls(tuple(sorted(out.items())))

    def mask(self, n_layers: int, n_heads: int) -> np.ndarray:
        """The graph's head_mask row for this request: [L, H], 0 at the removed heads."""
        m = np.ones((n_layers, n_heads), np.float32)
        for layer, heads in self.heads:
            m[layer, list(heads)] = 0
        return m

    def json(self) -> dict[str, list[int]]:
        return {str(layer): list(heads) for layer, heads in self.heads}
