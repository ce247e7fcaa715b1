"""Hidden states of a generation (`/v1/generate`'s `hidden_states`), from the step graphs'
`.attention` form, in /v1/embed's conventions (service.engine.internals.HiddenSpec).

`steps[k]` holds the states computed at the position whose logits chose generated token k:
the last prompt token (decoder) or the decoder start token (encoder-decoder) for k = 0, the
generated token k - 1 after that. Its attention row (`attention.steps[k]`) is that of the
same query."""

from __future__ import annotations

import numpy as np

from headwise.service.engine.internals import HiddenSpec
from headwise.service.engine.size import Block
from headwise.service.engine.values import DTYPES, encode_array


def step_states(states: np.ndarray, spec: HiddenSpec) -> dict:
    """One step's [L + 1, D] states → {shape: [L', D], data}. Pooling one token (`mean`,
    `cls`) is the token itself, so every pooling writes the same [L', D]."""
    a = np.ascontiguousarray(states[list(spec.layers)], dtype=DTYPES[spec.dtype])  # (L', D)
    return {"shape": list(a.shape), "data": encode_array(a, spec.encoding)}


def prompt_states(states: np.ndarray, spec: HiddenSpec) -> dict:
    """The prompt's un-padded [L + 1, P, D] states → {shape, data}: [L', P, D], or [L', D]
    pooled over the prompt's tokens, as /v1/embed writes one input's."""
    p = spec.payload(states, states.shape[1])
    return {"shape": p["shape"], "data": p["data"]}


def hidden_blocks(spec: HiddenSpec, prompt: int, new: int, d_model: int) -> tuple[Block, ...]:
    """What the hidden states of `new` steps write in the answer, with the prompt's (`prompt`
    tokens; 0 for an encoder-decoder, whose source has none): each a framed {shape, data}."""
    n = len(spec.layers)
    steps = (Block(n * d_model, spec.dtype, spec.encoding, rows=n),) * new  # one step's block, new times
    if not prompt:
        return steps
    rows = n * (prompt if spec.pooling == "none" else 1)
    return (*steps, Block(spec.values(prompt, d_model), spec.dtype, spec.encoding, rows=rows))
