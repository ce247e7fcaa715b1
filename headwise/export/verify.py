"""Parity of every variant of an encoder package (embedding, classification or token
classification) against the torch model: each output, the attention weights and batch
invariance; for embeddings also STS-B quality, which int8 and fp16 must keep. One table
(parity_table) shows any package's."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import numpy as np
import torch

from headwise import ascii_path
from headwise.export import manifest as mf
from headwise.export import runner, stsb, text_sets
from headwise.model.sentence import LoadedModel, default_checkpoint, load_encoder_model

# A fixed, varied set: ASCII, accents, CJK, emoji, numbers, empty, and longer than max_len.
PARITY_SENTENCES = [
    "Hello world",
    "The quick brown fox jumps over the lazy dog.",
    "",
    "A man is playing a guitar on stage while the crowd sings along.",
    "Ünïcödé — naïve café résumé, déjà vu!",
    "東京は日本の首都です。",
    "Emoji test 🎉🚀 with symbols: <>&%$#@!",
    "3.14159 is approximately pi; 2 + 2 = 4.",
    "Short.",
    "Transformers use scaled dot-product attention over queries, keys and values.",
    "Привет, как дела?",
    "   leading and trailing spaces   ",
    " ".join(["long"] * 400),
    "The stock market fell sharply on Monday after the central bank raised rates.",
]

# A classifier reads texts and pairs; a pair (a, b) is one sequence [CLS] a [SEP] b [SEP].
PARITY_PAIRS: list = [
    "Hello world", "", "A man is playing a guitar on stage while the crowd sings along.",
    "東京は日本の首都です。", " ".join(["long"] * 400),
    ("what is the capital of france", "Paris is the capital and largest city of France."),
    ("how do transformers work", "Attention weighs every token against every other token."),
    ("short", ""), ("", "an empty query"),
]
# Outputs with a row per token (B, T, ...), compared at real tokens only: padding rows are unused.
PER_TOKEN = ("last_hidden_state", "token_logits")
# The head's own output, whichever the package has.
HEAD_OUTPUTS = ("sentence_embedding", "logits", "token_logits")

ATTENTION_RTOL = 1e-4

# Thresholds a variant must meet (max abs diff vs torch, or quality figures); a figure the
# package does not have (logits of an embedding model) is not checked.
LIMITS = {
    # attentions_excess: max(|diff| - 1e-4 * |torch|), i.e. np.allclose(atol=1e-5, rtol=1e-4).
    # A flat 1e-5 is below fp32 noise on peaked heads: torch fp32 itself is 3e-5 from a
    # float64 reference there.
    # batch_invariance: max |diff| between an input run alone and in the batch of all of them.
    # attentions_f16_mismatches: elements of the graph's float16 attentions that differ from
    # numpy's float16 cast of its float32 ones (none: the service sends either).
    # hidden_states: every layer's, at real tokens, as last_hidden_state; ablation: the head's
    # output and the hidden states with ablation_mask's heads removed, against torch's.
    "fp32": {"sentence_embedding": 1e-4, "logits": 1e-4, "token_logits": 1e-4, "last_hidden_state": 1e-3,
             "attentions_excess": 1e-5, "attentions_f16_mismatches": 0, "batch_invariance": 1e-5,
             "hidden_states": 1e-3, "ablation": 1e-3},
    "fp16": {"sentence_embedding": 5e-3, "logits": 5e-2, "token_logits": 5e-2, "mean_cosine_to_fp32": 0.999,
             "stsb_drop": 0.2, "batch_invariance": 1e-3},
    "int8": {"mean_cosine_to_fp32": 0.998, "min_cosine_to_fp32": 0.99, "stsb_drop": 0.17,
             "batch_invariance": 1e-4},
}
# Figures that fail when they fall below their limit; every other one fails above it.
FLOORS = ("mean_cosine_to_fp32", "min_cosine_to_fp32")


def resolve_checkpoint(manifest: dict, checkpoint: Path | None) -> Path:
    """The checkpoint to verify against: the one given, else the bundled one if the package
    was exported from it."""
    if checkpoint is not None:
        return Path(checkpoint)
    default = default_checkpoint()
    if manifest["source"]["sha256"] == mf.sha256(default / "model.safetensors"):
        return default
    raise mf.PackageError(
        f"package {manifest['name']!r} was exported from {manifest['source']['path']!r}; "
        "pass --checkpoint DIR to verify it against torch"
    )


def torch_reference(loaded: LoadedModel, texts: list, head_mask: np.ndarray | None = None) -> tuple[dict, np.ndarray]:
    b = loaded.tokenizer(texts)
    with torch.no_grad():
        out = loaded.model(b.input_ids, b.attention_mask, b.token_type_ids, need_weights=True, fused=False,
                           head_mask=torch.from_numpy(head_mask) if head_mask is not None else None,
                           output_hidden_states=True)
    ref = {name: getattr(out, name).numpy() for name in (*HEAD_OUTPUTS, "last_hidden_state")
           if getattr(out, name) is not None}
    ref["attentions"] = torch.stack(out.attentions, 1).numpy()  # (B, L, H, T, T)
    ref["hidden_states"] = torch.stack(out.hidden_states, 1).numpy()  # (B, L + 1, T, D)
    return ref, b.attention_mask.numpy()


def ablation_mask(n: int, n_layers: int, n_heads: int) -> np.ndarray:
    """A fixed head mask for n inputs (B, L, H): input i loses head i mod H of every layer and
    every head of layer i mod L but one, so that each input's answer moves differently."""
    m = np.ones((n, n_layers, n_heads), np.float32)
    for i in range(n):
        m[i, :, i % n_heads] = 0
        m[i, i % n_layers, :] = 0
        m[i, i % n_layers, (i + 1) % n_heads] = 1
    return m


def ablation_diff(sess, loaded: LoadedModel, texts: list) -> float:
    """Max abs diff of the head's output (sentence embedding, logits or token logits, these at
    real tokens) and the hidden states between the analysis graph and torch, both with
    ablation_mask's heads removed."""
    cfg = loaded.model.config
    mask = ablation_mask(len(texts), cfg.n_layers, cfg.n_heads)
    ref, real = torch_reference(loaded, texts, mask)
    names = [n for n in (*HEAD_OUTPUTS, "hidden_states") if n in ref]
    got = dict(zip(names, sess.run(names, runner.session_feeds(sess, loaded.tokenizer, texts, mask)), strict=True))
    worst = 0.0
    for n in names:
        d = np.abs(got[n] - ref[n])
        if n == "hidden_states":
            d = _at_real(d, real)
        elif n in PER_TOKEN:
            d = d[real.astype(bool)]
        worst = max(worst, float(d.max()))
    return worst


def _at_real(d: np.ndarray, mask: np.ndarray) -> np.ndarray:
    """(B, L + 1, T, D) differences at real tokens only."""
    return d * mask[:, None, :, None]


def max_diffs(outputs: dict[str, np.ndarray], ref: dict[str, np.ndarray], mask: np.ndarray) -> dict:
    """Max abs diff per output; hidden states and token logits only at real tokens (padding
    rows are unused)."""
    d = {}
    for name, got in outputs.items():
        if name == "attentions_f16":
            d["attentions_f16_mismatches"] = int((got != outputs["attentions"].astype(np.float16)).sum())
            continue
        want = ref[name]
        if name in PER_TOKEN:
            real = mask.astype(bool)
            d[name] = float(np.abs(got[real] - want[real]).max())
        elif name == "hidden_states":
            d[name] = float(_at_real(np.abs(got - want), mask).max())
        else:
            d[name] = float(np.abs(got - want).max())
        if name == "attentions":
            d["attentions_excess"] = float((np.abs(got - want) - ATTENTION_RTOL * np.abs(want)).max())
    return d


def batch_invariance(sess, tokenizer, texts: list[str], batched: dict[str, np.ndarray]) -> float:
    """Max |diff| between each input's outputs run alone and its outputs in `batched` (all of
    texts in one padded batch): every output, at real tokens only."""
    names = [o.name for o in sess.get_outputs()]
    worst = 0.0
    for i, text in enumerate(texts):
        f = runner.session_feeds(sess, tokenizer, [text])
        alone = dict(zip(names, sess.run(names, f), strict=True))
        t = f["attention_mask"].shape[1]
        for name, got in alone.items():
            ref = batched[name][i : i + 1]
            if name in PER_TOKEN:
                ref = ref[:, :t]
            elif name == "hidden_states":
                ref = ref[:, :, :t]
            elif name in ("attentions", "attentions_f16"):
                ref = ref[..., :t, :t]
            worst = max(worst, float(np.abs(got.astype(np.float32) - ref.astype(np.float32)).max()))
    return worst


def stsb_figures(parity: dict, manifest: dict, embeddings: dict[str, np.ndarray]) -> None:
    """Cosine to the fp32 embeddings and the drop in STS-B Spearman, for int8 and fp16."""
    fp32 = embeddings["fast"]
    for vname, v in manifest["variants"].items():
        if v["precision"] in ("int8", "fp16"):
            emb = embeddings[vname]
            cos = (emb * fp32).sum(1) / (np.linalg.norm(emb, axis=1) * np.linalg.norm(fp32, axis=1))
            f = parity[vname]
            f["mean_cosine_to_fp32"] = round(float(cos.mean()), 6)
            f["min_cosine_to_fp32"] = round(float(cos.min()), 6)
            f["stsb_drop"] = round(parity["fast"]["stsb_spearman"] - f["stsb_spearman"], 4)


def check_ascii_path(tokenizer: Path, max_len: int, progress: Callable[[str], None] = print) -> None:
    """The service reads printable ASCII past BERT's normalizer (headwise.ascii_path): that reading
    must equal the usual one on every text it takes of the check's sets, or the package fails."""
    path = ascii_path.AsciiPath.of(tokenizer)
    if path is None:
        return
    texts = text_sets.stsb() + text_sets.multilingual() + text_sets.hostile() + text_sets.ascii_hostile()
    bad = ascii_path.mismatches(tokenizer, texts, max_len)
    if bad:
        raise mf.PackageError(f"{tokenizer.name}: the ASCII path reads {len(bad)} texts otherwise than the "
                              "tokenizer: " + "; ".join(bad[:5]))
    taken = sum(path.text(t) is not None for t in texts)
    progress(f"tokenizer: the ASCII path reads the {taken} of {len(texts)} checked texts it takes as the tokenizer does")


def verify(
    pkg: Path,
    checkpoint: Path | None = None,
    stsb_path: Path | None = None,
    progress: Callable[[str], None] = print,
    quality: bool = True,
    inputs: list = PARITY_SENTENCES,
) -> dict:
    """Re-check hashes, measure parity on `inputs` (the kind's: texts, or texts and pairs) and
    for embeddings quality, write them into manifest.parity. Raises PackageError naming the
    file or the figure that fails. quality=False skips the STS-B figures (meaningless for tiny
    random test models)."""
    manifest = mf.read(pkg)
    mf.check_hashes(pkg, manifest)
    progress("hashes ok")
    if manifest.get("tokenizer"):
        check_ascii_path(pkg / manifest["tokenizer"]["file"], int(manifest["max_len"]), progress)
    loaded = load_encoder_model(resolve_checkpoint(manifest, checkpoint))
    if loaded.task != manifest.get("task", "embedding"):
        raise mf.PackageError(f"{manifest['name']!r} is a {manifest.get('task', 'embedding')} package, "
                              f"its checkpoint a {loaded.task} model")
    texts = inputs
    ref, mask = torch_reference(loaded, texts)
    sts_file = stsb.find_stsb(stsb_path) if quality and loaded.task == "embedding" else None
    pairs = stsb.load_pairs(sts_file) if sts_file else None
    parity, failures, sts_emb = {}, [], {}

    for vname, v in manifest["variants"].items():
        sess = runner.session(pkg / v["file"])
        names = [o.name for o in sess.get_outputs()]
        got = dict(zip(names, sess.run(names, runner.session_feeds(sess, loaded.tokenizer, texts)), strict=True))
        figures = max_diffs(got, ref, mask)
        figures["batch_invariance"] = batch_invariance(sess, loaded.tokenizer, texts, got)
        if "head_mask" in {i.name for i in sess.get_inputs()}:
            figures["ablation"] = ablation_diff(sess, loaded, texts)
        if pairs is not None and vname != "analysis":  # the attention graph's numbers, with all heads kept
            a, b, gold = pairs
            emb = runner.embed(sess, loaded.tokenizer, a + b)
            figures["stsb_spearman"] = round(stsb.sts_score(emb[: len(a)], emb[len(a):], gold), 4)
            sts_emb[vname] = emb
        parity[vname] = figures

    if "fast" in sts_emb:
        stsb_figures(parity, manifest, sts_emb)
    elif pairs is None and quality and loaded.task == "embedding" and any(
            v["precision"] != "fp32" for v in manifest["variants"].values()):
        progress("STS Benchmark data not found (--stsb or $HEADWISE_STSB): int8/fp16 quality not measured")

    for vname, v in manifest["variants"].items():
        bad = _failing(parity[vname], LIMITS[v["precision"]])
        parity[vname]["passed"] = not bad
        failures += [f"{v['file']}: {b}" for b in bad]
    manifest["parity"] = parity
    mf.write(pkg, manifest)
    if failures:
        raise mf.PackageError("parity check failed:\n  " + "\n  ".join(failures))
    return parity


def _failing(figures: dict, limits: dict) -> list[str]:
    out = []
    for key, lim in limits.items():
        x = figures.get(key)
        if x is None:
            continue
        if key in FLOORS and x < lim:
            out.append(f"{key} = {x:.4f} is below {lim:g}")
        elif key not in FLOORS and x > lim:
            out.append(f"{key} = {x:.3g} exceeds {lim:g}")
    return out


# (figure, column title, format) of every kind of package: max abs diffs in e-notation,
# quality figures as decimals. A table shows the columns its package has.
TABLE = [("sentence_embedding", "embedding", ".2e"), ("logits", "logits", ".2e"),
         ("token_logits", "tok_logits", ".2e"), ("last_hidden_state", "hidden", ".2e"),
         ("hidden_states", "layers", ".2e"), ("ablation", "ablation", ".2e"), ("encoder_hidden_states", "enc_hidden", ".2e"),
         ("cache", "cache", ".2e"), ("attentions", "attentions", ".2e"), ("cross_attentions", "cross_att", ".2e"),
         ("batch_invariance", "batch_inv", ".2e"), ("stsb_spearman", "stsb", ".4f"),
         ("mean_cosine_to_fp32", "mean_cos", ".4f"), ("min_cosine_to_fp32", "min_cos", ".4f"),
         ("passed", "passed", "")]


def parity_table(parity: dict) -> str:
    """Max abs diff vs torch, batch invariance (alone vs batched), STS-B Spearman × 100 and
    cosine to fp32 over the STS-B sentences, whether the bars held; `-` where not measured."""
    columns = [c for c in TABLE if any(c[0] in f for f in parity.values())]
    width = max([len("variant"), *map(len, parity)]) + 2
    head = f"{'variant':<{width}}" + "".join(f"{title:>12}" for _, title, _ in columns)
    rows = [head, "-" * len(head)]
    for v, f in parity.items():
        cells = "".join(f"{'-' if f.get(k) is None else format(f[k], fmt) if fmt else str(f[k]):>12}"
                        for k, _, fmt in columns)
        rows.append(f"{v:<{width}}" + cells)
    return "\n".join(rows)
