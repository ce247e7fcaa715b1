"""The running batch of a generative model: every active sequence's KV cache stacked along
the batch axis, and the two graph calls that grow it (docs/model-package.md, "joining").

- admit: new sequences get their first cache (decoder: prefill, which also gives their first
  token; encoder-decoder: the encoder's cross keys/values and an empty self-attention cache).
- join: caches of different lengths are left-padded with zeros along the sequence axis
  (attention_mask 0); sources of different lengths are right-padded (encoder_attention_mask 0).
- step: one decode / decoder_step call for every row; each row picks its own next token.
- keep: finished or cancelled rows are dropped, and columns no row uses any more are cut.

Everything here runs on the model's inference thread.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

import numpy as np

from headwise.service.engine.generation.hidden import prompt_states
from headwise.service.engine.generation.sequence import Sequence
from headwise.service.engine.outputs import step_attention

I64 = np.int64


@dataclass
class Batch:
    rows: list[Sequence]
    keys: np.ndarray  # [L, B, H, T, Dh]
    values: np.ndarray
    mask: np.ndarray  # [B, T]
    next_ids: np.ndarray  # [B]: the token each row feeds next
    cross_keys: np.ndarray | None = None  # [L, B, H, S, Dh]
    cross_values: np.ndarray | None = None
    enc_mask: np.ndarray | None = None  # [B, S]


def _pad(x: np.ndarray, n: int, axis: int, left: bool) -> np.ndarray:
    if n == 0:
        return x
    width = [(0, 0)] * x.ndim
    width[axis] = (n, 0) if left else (0, n)
    return np.pad(x, width)


def join(a: Batch | None, b: Batch | None) -> Batch | None:
    if a is None or not a.rows:
        return b
    if b is None or not b.rows:
        return a
    t = max(a.mask.shape[1], b.mask.shape[1])

    def cache(x, y, axis, batch_axis, left, n):
        return np.concatenate([_pad(x, n - x.shape[axis], axis, left), _pad(y, n - y.shape[axis], axis, left)],
                              batch_axis)

    out = Batch(rows=a.rows + b.rows, keys=cache(a.keys, b.keys, 3, 1, True, t),
                values=cache(a.values, b.values, 3, 1, True, t), mask=cache(a.mask, b.mask, 1, 0, True, t),
                next_ids=np.concatenate([a.next_ids, b.next_ids]))
    if a.enc_mask is not None:
        s = max(a.enc_mask.shape[1], b.enc_mask.shape[1])
        out.cross_keys = cache(a.cross_keys, b.cross_keys, 3, 1, False, s)
        out.cross_values = cache(a.cross_values, b.cross_values, 3, 1, False, s)
        out.enc_mask = cache(a.enc_mask, b.enc_mask, 1, 0, False, s)
    return out


def keep(batch: Batch | None) -> Batch | None:
    """The batch without finished or cancelled rows, and without leading cache columns (and
    trailing source columns) that no remaining row attends to."""
    if batch is None:
        return None
    idx = [i for i, r in enumerate(batch.rows) if not r.finished]
    if not idx:
        return None
    if len(idx) < len(batch.rows):
        sel = np.asarray(idx)
        batch = Batch([batch.rows[i] for i in idx], batch.keys[:, sel], batch.values[:, sel], batch.mask[sel],
                      batch.next_ids[sel],
                      *((batch.cross_keys[:, sel], batch.cross_values[:, sel], batch.enc_mask[sel])
                        if batch.enc_mask is not None else ()))
    used = batch.mask.any(0)
    first = int(np.argmax(used)) if used.any() else batch.mask.shape[1]
    if first:
        batch.keys, batch.values = batch.keys[:, :, :, first:], batch.values[:, :, :, first:]
        batch.mask = batch.mask[:, first:]
    if batch.enc_mask is not None:
        s = int(np.flatnonzero(batch.enc_mask.any(0)).max()) + 1
        if s < batch.enc_mask.shape[1]:
            batch.cross_keys, batch.cross_values = batch.cross_keys[:, :, :, :s], batch.cross_values[:, :, :, :s]
            batch.enc_mask = batch.enc_mask[:, :s]
    return batch


def pad_rows(seqs: list[Sequence], pad: int, left: bool) -> tuple[np.ndarray, np.ndarray]:
    n = max(len(s.prompt_ids) for s in seqs)
    ids = np.full((len(seqs), n), pad, I64)
    mask = np.zeros((len(seqs), n), I64)
    for i, s in enumerate(seqs):
        k = len(s.prompt_ids)
        sl = slice(n - k, n) if left else slice(0, k)
        ids[i, sl], mask[i, sl] = s.prompt_ids, 1
    return ids, mask


class Stepper:
    """The graph calls of one model. `backend.run(variant, feeds, outputs)`; `shape` is
    (L, H, Dh); `special` the manifest's special_tokens."""

    def __init__(self, backend, architecture: str, shape: tuple[int, int, int], special: dict, on_run=None):
        self.backend = backend
        self.decoder_only = architecture == "decoder"
        self.L, self.H, self.Dh = shape
        self.pad = int(special["pad"]) if special.get("pad") is not None else 0
        self.start = special.get("decoder_start")
        self.on_run = on_run or (lambda variant, seconds, rows, tokens: None)

    def _run(self, graph: str, seqs: list[Sequence], feeds: dict, outputs: list[str]) -> dict:
        """One call of `graph`, in its `.attention` form when a row of `seqs` asks for attention
        or hidden states; only what some row asks for is fetched."""
        attention = any(s.wants_attention for s in seqs)
        hidden = any(s.wants_hidden for s in seqs)
        variant = graph + ".attention" if (attention or hidden) and self.backend.has(graph + ".attention") else graph
        if variant.endswith(".attention"):
            if attention:
                outputs = outputs + ["attentions"] + (["cross_attentions"] if graph == "decoder_step" else [])
            if hidden:
                outputs = [*outputs, "hidden_states"]
        t0 = time.perf_counter()
        out = self.backend.run(variant, feeds, outputs)
        ids = feeds["input_ids"]
        self.on_run(variant, time.perf_counter() - t0, ids.shape[0], ids.size)
        return out

    def admit(self, seqs: list[Sequence]) -> tuple[Batch | None, list]:
        """New sequences → their batch (None when all finished at once) and events."""
        events = []
        if not self.decoder_only:
            src, src_mask = pad_rows(seqs, self.pad, left=False)
            enc = self._run("encoder", [], {"input_ids": src, "attention_mask": src_mask},
                            ["cross_keys", "cross_values"])
            empty = np.zeros((self.L, len(seqs), self.H, 0, self.Dh), np.float32)
            batch = Batch(list(seqs), empty, empty.copy(), np.zeros((len(seqs), 0), I64),
                          np.full(len(seqs), self.start, I64), enc["cross_keys"], enc["cross_values"], src_mask)
            return batch, events
        ids, mask = pad_rows(seqs, self.pad, left=True)
        out = self._run("prefill", seqs, {"input_ids": ids, "attention_mask": mask},
                        ["logits", "present_keys", "present_values"])
        tokens = np.zeros(len(seqs), I64)
        for i, s in enumerate(seqs):
            real = mask[i].astype(bool)
            row = states = None
            if s.wants_attention:
                a = out["attentions"][i]  # [L, H, P, P]
                s.prompt_attention = step_attention(a[:, :, real][:, :, :, real], s.params.attention)
                row = a[:, :, -1:, real]
            if s.wants_hidden:
                h = out["hidden_states"][i]  # [L + 1, P, D]
                s.prompt_hidden = prompt_states(h[:, real], s.params.hidden)
                states = h[:, -1]  # [L + 1, D]: the last prompt token's, whose logits choose token 0
            tokens[i] = s.choose(out["logits"][i])
            events.append((s, s.advance(int(tokens[i]), row, None, states)))
        batch = Batch(list(seqs), out["present_keys"], out["present_values"], mask, tokens)
        return keep(batch), events

    def step(self, batch: Batch) -> list:
        """One token for every row of the batch; returns [(sequence, events)]."""
        b = len(batch.rows)
        mask = np.concatenate([batch.mask, np.ones((b, 1), I64)], 1)
        feeds = {"input_ids": batch.next_ids[:, None], "attention_mask": mask,
                 "past_keys": batch.keys, "past_values": batch.values}
        if self.decoder_only:
            out = self._run("decode", batch.rows, feeds, ["logits", "present_keys", "present_values"])
        else:
            feeds.update(encoder_attention_mask=batch.enc_mask, cross_keys=batch.cross_keys,
                         cross_values=batch.cross_values)
            out = self._run("decoder_step", batch.rows, feeds, ["logits", "present_keys", "present_values"])
        batch.keys, batch.values, batch.mask = out["present_keys"], out["present_values"], mask
        delay = max(s.step_delay for s in batch.rows)
        if delay:
            time.sleep(delay)
        events = []
        for i, s in enumerate(batch.rows):
            if s.finished:  # cancelled while the graph ran
                continue
            self_att = cross = states = None
            if s.wants_attention:
                self_att = out["attentions"][i][..., mask[i].astype(bool)]
                if "cross_attentions" in out:
                    cross = out["cross_attentions"][i][..., batch.enc_mask[i].astype(bool)]
            if s.wants_hidden:
                states = out["hidden_states"][i][:, -1]  # [L + 1, 1, D] → [L + 1, D]: the fed token's
            token = s.choose(out["logits"][i])
            batch.next_ids[i] = token
            events.append((s, s.advance(token, self_att, cross, states)))
        return events
