"""int8 schemes side by side on one package: quality, batch invariance and in-process speed.

    python -m bench.experiments.int8_schemes --models /tmp/bench-models [--stsb FILE] [--reps 5]

Each scheme quantises the package's fast.onnx (fp32) into a temporary folder:
- `dynamic per-tensor`: onnxruntime's quantize_dynamic (what headwise shipped before issue 15);
- `per-token symmetric`, `per-token asymmetric`: headwise/export/quantize.py with one scheme everywhere;
- `per-token, asymmetric after GELU`: headwise/export/quantize.py's default, what `headwise export` ships;
- `weight-only int8 (MatMulNBits)`: onnxruntime's 8-bit block-wise weights, int8 compute.

Quality: cosine to fp32 over every STS-B dev sentence and over export.verify's varied parity
sentences, STS-B Spearman × 100. Batch invariance: max |diff| of one sentence alone and beside 1, 15 and 63
others. Speed: inputs/s at batch 16 × 20 and × 128 tokens, schemes alternated within each
repetition, medians (and the ratio of medians to fp32). Writes bench/results/<name>.md.
"""

from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path

import numpy as np

from headwise.export import cpu, runner, stsb
from headwise.export.quantize import quantize_int8
from headwise.export.speed import alternated_rates
from headwise.export.verify import PARITY_SENTENCES as VARIED

RESULTS = Path(__file__).resolve().parents[1] / "results"


def _dynamic(src: Path, dst: Path) -> None:
    import onnx
    from onnxruntime.quantization import QuantType, quantize_dynamic

    quantize_dynamic(str(src), str(dst), weight_type=QuantType.QInt8, per_channel=True,
                     extra_options={"DefaultTensorType": onnx.TensorProto.FLOAT})


def _nbits(src: Path, dst: Path) -> None:
    import onnx
    from onnxruntime.quantization.matmul_nbits_quantizer import (
        DefaultWeightOnlyQuantConfig,
        MatMulNBitsQuantizer,
    )

    cfg = DefaultWeightOnlyQuantConfig(block_size=32, is_symmetric=True, accuracy_level=4, bits=8)
    q = MatMulNBitsQuantizer(onnx.load(str(src)), algo_config=cfg)
    q.process()
    q.model.save_model_to_file(str(dst), use_external_data_format=False)


SCHEMES = {
    "dynamic per-tensor (before)": _dynamic,
    "per-token symmetric": lambda s, d: quantize_int8(s, d, asymmetric=lambda node: False),
    "per-token asymmetric": lambda s, d: quantize_int8(s, d, asymmetric=lambda node: True),
    "per-token, asymmetric after GELU (shipped)": quantize_int8,
    "weight-only int8 (MatMulNBits, block 32)": _nbits,
}


def _one(sess, tokenizer, texts: list[str]) -> np.ndarray:
    wanted = {i.name for i in sess.get_inputs()}
    f = {k: v for k, v in runner.feeds(tokenizer, texts).items() if k in wanted}
    return sess.run(["sentence_embedding"], f)[0]


def invariance(sess, tokenizer, others: list[str]) -> float:
    probe = "The same sentence, embedded alone and in company."
    alone = _one(sess, tokenizer, [probe])[0]
    rng = np.random.default_rng(0)
    worst = 0.0
    for n in (1, 15, 63):
        batch = [others[i] for i in rng.integers(0, len(others), n)] + [probe]
        worst = max(worst, float(np.abs(_one(sess, tokenizer, batch)[-1] - alone).max()))
    return worst


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--models", type=Path, required=True, help="a package, or a folder with one")
    ap.add_argument("--stsb", type=Path, help="STS-B dev file (default: export's own lookup)")
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--seconds", type=float, default=1.0)
    ap.add_argument("--name", default="int8-schemes")
    a = ap.parse_args()
    from headwise.model.sentence import default_checkpoint, load_sentence_model

    pkg = a.models if (a.models / "manifest.json").is_file() else next(a.models.glob("*/manifest.json")).parent
    tokenizer = load_sentence_model(default_checkpoint()).tokenizer
    sts_file = stsb.find_stsb(a.stsb)
    if sts_file is None:
        raise SystemExit("no STS-B dev file: pass --stsb FILE")
    left, right, gold = stsb.load_pairs(sts_file)
    texts = left + right + VARIED
    n_sts = len(left) + len(right)
    fp32 = runner.session(pkg / "fast.onnx")
    ref = runner.embed(fp32, tokenizer, texts)
    rows, sessions = [], {"fp32": fp32}
    with tempfile.TemporaryDirectory() as tmp:
        for name, make in SCHEMES.items():
            path = Path(tmp) / f"{len(sessions)}.onnx"
            make(pkg / "fast.onnx", path)
            sessions[name] = s = runner.session(path)
            e = runner.embed(s, tokenizer, texts)
            cos = (e * ref).sum(1) / (np.linalg.norm(e, axis=1) * np.linalg.norm(ref, axis=1))
            rows.append((name, cos[:n_sts].mean(), cos[:n_sts].min(), cos[n_sts:].min(),
                         stsb.sts_score(e[: len(left)], e[len(left):n_sts], gold), invariance(s, tokenizer, left)))
            print(f"{name}: measured quality", flush=True)
        fast = {t: alternated_rates(sessions, 16, t, a.reps, a.seconds) for t in (20, 128)}
    base_sp = stsb.sts_score(ref[: len(left)], ref[len(left):n_sts], gold)
    lines = [f"# int8 schemes on {pkg.name}", "",
             f"CPU: {cpu.label()}; command: `python -m bench.experiments.int8_schemes --models {a.models} --reps {a.reps}`;",
             f"date (UTC) {time.strftime('%Y-%m-%d %H:%M', time.gmtime())}; medians of {a.reps} alternated "
             f"repetitions of {a.seconds:g} s. Speed ratios hold only for this CPU.", "",
             "| scheme | mean cos STS-B | min cos STS-B | min cos varied | STS-B Spearman | batch invariance "
             "| b16×20 inputs/s (× fp32) | b16×128 inputs/s (× fp32) |", "|---|---|---|---|---|---|---|---|",
             f"| fp32 | 1 | 1 | 1 | {base_sp:.2f} | {invariance(fp32, tokenizer, left):.1e} | "
             f"{fast[20]['fp32']:.0f} | {fast[128]['fp32']:.0f} |"]
    for name, mean, mn, mn_varied, sp, inv in rows:
        cells = " | ".join(f"{fast[t][name]:.0f} ({fast[t][name] / fast[t]['fp32']:.2f}×)" for t in (20, 128))
        lines.append(f"| {name} | {mean:.5f} | {mn:.4f} | {mn_varied:.4f} | {sp:.2f} | {inv:.1e} | {cells} |")
    out = RESULTS / f"{a.name}.md"
    out.write_text("\n".join(lines) + "\n")
    print("\n".join(lines))
    print(f"wrote {out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
