"""Parity of every graph of a generative package against the torch model.

Each graph runs on a fixed batch (left-padded prompts for a decoder, right-padded sources
for an encoder-decoder), and the step graphs run three steps in a chain, each fed the
cache the previous ONNX step returned, against torch recomputing the whole sequence.
Tokens are fixed, not argmax'ed, so a near-tie in a random model cannot make two runs part.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import numpy as np
import torch

from headwise.export import manifest as mf
from headwise.export import runner
from headwise.export.generative_graphs import cross_keys_values
from headwise.export.verify import ATTENTION_RTOL
from headwise.model.importers import load_checkpoint
from headwise.model.transformer import Decoder, EncoderDecoder, position_ids_from_mask

# Max abs diff vs torch (fp32). attentions_excess as in headwise/export/verify.py:
# max(|diff| - 1e-4·|torch|), i.e. np.allclose(atol=1e-5, rtol=1e-4).
LIMITS = {"logits": 1e-3, "cache": 1e-3, "encoder_hidden_states": 1e-3, "attentions_excess": 1e-5,
          "cross_attentions_excess": 1e-5, "hidden_states": 1e-3}
DECODER_OUTPUTS = ("logits", "present_keys", "present_values", "attentions", "hidden_states")
STEP_OUTPUTS = ("logits", "present_keys", "present_values", "attentions", "cross_attentions", "hidden_states")
STEPS = 3


def _batch(vocab: int, pad: int, left: bool) -> tuple[np.ndarray, np.ndarray]:
    """3 sequences of 7 tokens with 0, 3 and 6 padding positions (left or right)."""
    rng = np.random.default_rng(0)
    ids = rng.integers(0, vocab, (3, 7), dtype=np.int64)
    lengths = [7, 4, 1]
    mask = np.array([[1] * n + [0] * (7 - n) for n in lengths], dtype=np.int64)
    if left:
        mask = mask[:, ::-1].copy()
    return np.where(mask == 1, ids, pad), mask


class _Figures:
    """Collects max diffs per variant and output name."""

    def __init__(self):
        self.parity: dict[str, dict[str, float]] = {}

    def add(self, variant: str, name: str, got: np.ndarray, want: np.ndarray, mask=None) -> None:
        """mask (B, T): compare the cache at real tokens only. A padding position's query sees
        no real key, so its row is uniform over whatever keys exist, and its K/V in later
        layers change with the sequence length; no real token ever attends to them."""
        if mask is not None and name.startswith("present_"):
            real = mask.astype(bool)
            got, want = got.transpose(1, 3, 0, 2, 4)[real], want.transpose(1, 3, 0, 2, 4)[real]
        if mask is not None and name == "hidden_states" and mask.shape[1] == got.shape[2]:
            real = mask.astype(bool)  # (B, T): padding rows of a prefill are never used
            got, want = got.transpose(0, 2, 1, 3)[real], want.transpose(0, 2, 1, 3)[real]  # (real, L + 1, D)
        f = self.parity.setdefault(variant, {})
        diff = np.abs(got - want)
        key = "cache" if name.startswith(("present_", "cross_keys", "cross_values")) else name
        f[key] = max(f.get(key, 0.0), float(diff.max()))
        if name.endswith("attentions"):
            excess = float((diff - ATTENTION_RTOL * np.abs(want)).max())
            f[f"{name}_excess"] = max(f.get(f"{name}_excess", -1.0), excess)

    def failures(self, files: dict[str, str]) -> list[str]:
        return [f"{files[v]}: {k} = {x:.3g} exceeds {LIMITS[k]:g}"
                for v, f in self.parity.items() for k, x in f.items() if k in LIMITS and x > LIMITS[k]]


def _t(x: np.ndarray) -> torch.Tensor:
    return torch.from_numpy(x)


def _stack(present) -> tuple[np.ndarray, np.ndarray]:
    return (torch.stack([k for k, _ in present]).numpy(), torch.stack([v for _, v in present]).numpy())


def _check_decoder(model: Decoder, sessions: dict, special: dict, fig: _Figures) -> None:
    ids, mask = _batch(model.config.vocab_size, special["pad"], left=True)
    new = np.random.default_rng(1).integers(0, model.config.vocab_size, (3, STEPS), dtype=np.int64)

    def reference(ids: np.ndarray, mask: np.ndarray):
        with torch.no_grad():
            m = _t(mask)
            return model(_t(ids), m, need_weights=True, fused=False, position_ids=position_ids_from_mask(m),
                         output_hidden_states=True)

    for form in ("", ".attention"):
        out = sessions["prefill" + form].run(None, {"input_ids": ids, "attention_mask": mask})
        ref = reference(ids, mask)
        want = {"logits": ref.logits[:, -1].numpy(), "attentions": torch.stack(ref.attentions, 1).numpy(),
                "hidden_states": torch.stack(ref.hidden_states, 1).numpy()}  # (B, L + 1, T, D)
        want["present_keys"], want["present_values"] = _stack(ref.present)
        for name, got in zip(DECODER_OUTPUTS, out, strict=False):
            fig.add("prefill" + form, name, got, want[name], mask)
        keys, values = out[1], out[2]
        seq, m = ids, mask
        for step in range(STEPS):
            seq = np.concatenate([seq, new[:, step : step + 1]], 1)
            m = np.concatenate([m, np.ones((3, 1), np.int64)], 1)
            feeds = {"input_ids": seq[:, -1:], "attention_mask": m, "past_keys": keys, "past_values": values}
            out = sessions["decode" + form].run(None, feeds)
            ref = reference(seq, m)
            want = {"logits": ref.logits[:, -1].numpy(),
                    "attentions": torch.stack(ref.attentions, 1)[:, :, :, -1:].numpy(),
                    "hidden_states": torch.stack(ref.hidden_states, 1)[:, :, -1:].numpy()}  # (B, L + 1, 1, D)
            want["present_keys"], want["present_values"] = _stack(ref.present)
            for name, got in zip(DECODER_OUTPUTS, out, strict=False):
                fig.add("decode" + form, name, got, want[name], m)
            keys, values = out[1], out[2]


def _check_encoder_decoder(model: EncoderDecoder, sessions: dict, special: dict, fig: _Figures) -> None:
    cfg = model.config
    src, src_mask = _batch(cfg.vocab_size, special["pad"], left=False)
    with torch.no_grad():
        enc = model.encoder(_t(src), _t(src_mask), need_weights=True, fused=False)
        ck, cv = cross_keys_values(model, enc.last_hidden_state)
    want = {"encoder_hidden_states": enc.last_hidden_state.numpy(), "cross_keys": ck.numpy(),
            "cross_values": cv.numpy(), "attentions": torch.stack(enc.attentions, 1).numpy()}
    names = ("encoder_hidden_states", "cross_keys", "cross_values", "attentions")
    for form in ("", ".attention"):
        out = sessions["encoder" + form].run(None, {"input_ids": src, "attention_mask": src_mask})
        for name, got in zip(names, out, strict=False):
            g, w = got, want[name]
            if name == "encoder_hidden_states":  # padding rows are never attended to
                g, w = got[src_mask == 1], w[src_mask == 1]
            fig.add("encoder" + form, name, g, w)

    n, h, dh = len(model.decoder.layers), cfg.n_heads, cfg.d_head
    forced = np.random.default_rng(1).integers(0, cfg.vocab_size, (3, STEPS), dtype=np.int64)
    for form in ("", ".attention"):
        tgt = np.full((3, 1), special["decoder_start"], np.int64)
        keys = values = np.zeros((n, 3, h, 0, dh), np.float32)  # the first step has no past
        for step in range(STEPS):
            feeds = {"input_ids": tgt[:, -1:], "attention_mask": np.ones_like(tgt),
                     "encoder_attention_mask": src_mask, "cross_keys": want["cross_keys"],
                     "cross_values": want["cross_values"], "past_keys": keys, "past_values": values}
            out = sessions["decoder_step" + form].run(None, feeds)
            with torch.no_grad():
                ref = model.decoder(_t(tgt), None, enc.last_hidden_state, _t(src_mask), need_weights=True,
                                    fused=False, output_hidden_states=True)
            w = {"logits": ref.logits[:, -1].numpy(),
                 "attentions": torch.stack(ref.attentions, 1)[:, :, :, -1:].numpy(),
                 "cross_attentions": torch.stack(ref.cross_attentions, 1)[:, :, :, -1:].numpy(),
                 "hidden_states": torch.stack(ref.hidden_states, 1)[:, :, -1:].numpy()}  # (B, L + 1, 1, D)
            w["present_keys"], w["present_values"] = _stack(ref.present)
            for name, got in zip(STEP_OUTPUTS, out, strict=False):
                fig.add("decoder_step" + form, name, got, w[name])
            keys, values = out[1], out[2]
            tgt = np.concatenate([tgt, forced[:, step : step + 1]], 1)


def verify_generative(pkg: Path, checkpoint: Path, progress: Callable[[str], None] = print) -> dict:
    """Re-check hashes, measure every graph against torch, write manifest.parity. Raises
    PackageError naming the file and the figure that fails."""
    manifest = mf.read(pkg)
    mf.check_hashes(pkg, manifest)
    progress("hashes ok")
    model, _ = load_checkpoint(checkpoint)
    sessions = {v: runner.session(pkg / spec["file"]) for v, spec in manifest["variants"].items()}
    fig = _Figures()
    if manifest["architecture"] == "decoder":
        _check_decoder(model, sessions, manifest["special_tokens"], fig)
    else:
        _check_encoder_decoder(model, sessions, manifest["special_tokens"], fig)
    manifest["parity"] = {v: {k: round(x, 9) for k, x in f.items()} for v, f in fig.parity.items()}
    mf.write(pkg, manifest)
    failures = fig.failures({v: s["file"] for v, s in manifest["variants"].items()})
    if failures:
        raise mf.PackageError("parity check failed:\n  " + "\n  ".join(failures))
    return manifest["parity"]
