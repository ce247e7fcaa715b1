"""A sparse encoder (SPLADE) served against sentence-transformers' SparseEncoder, on this CPU, in
one sitting:

    python -m bench.experiments.sparse_speed --threads 2 --reps 7 --out bench/results/sparse-cpu.md

A random BertForMaskedLM of MiniLM's size (d_model 384, 6 layers, d_ff 1536) over BERT's 30,522
entries of vocabulary (its head scores every entry at every position: most of the work), saved by
sentence-transformers as a SparseEncoder (MLMTransformer, then SpladePooling max, relu) and
exported by `headwise export` (fp32). Then, alternating call by call, at 16 × 128 and 1 × 20
tokens: `SparseEncoder.encode` (torch at `--threads` threads, a dense tensor out) against what the
service does in process (bench.families.Served: the tokenizer, the padded feeds, the fast graph
on the service's backend). The report gives each side's median ms, the ratio and the largest
difference of the two answers (they must agree, or the timing means nothing).
"""

from __future__ import annotations

import argparse
import shlex
import sys
import tempfile
from functools import partial
from pathlib import Path

import numpy as np

from bench.alternate import alternate, medians
from bench.facts import machine_facts
from bench.families import SHAPES, SIZE, Served, texts_of, timed
from bench.report import facts_table

VOCAB = 30522  # bert-base-uncased's, as SPLADE models keep it


def build(root: Path):
    """The SparseEncoder checkpoint → (its dir, the SparseEncoder)."""
    import torch
    from sentence_transformers import SparseEncoder
    from sentence_transformers.sparse_encoder.modules import MLMTransformer, SpladePooling
    from transformers import BertConfig, BertForMaskedLM

    from tests.fixtures import families as fx

    raw = root / "hf"
    raw.mkdir(parents=True)
    fx.bpe_tokenizer(raw, fx.BERT_SPECIALS, fx.BERT_TEMPLATE, max_len=512)
    torch.manual_seed(0)
    model = BertForMaskedLM(BertConfig(vocab_size=VOCAB, **SIZE, max_position_embeddings=512)).eval()
    fx.masked_lm_ready(raw, model)
    model.save_pretrained(str(raw))
    st = SparseEncoder(modules=[MLMTransformer(str(raw)), SpladePooling("max")], device="cpu").eval()
    st.save(str(root / "st"))
    return root / "st", st


def measure(work: Path, threads: int, reps: int, log) -> list[dict]:
    import torch

    from headwise.export.package import build_package

    torch.set_num_threads(threads)
    ckpt, st = build(work)
    pkg = build_package(ckpt, work / "models", "splade", int8=False, fp16=False, quality=False, progress=lambda m: None)
    served = Served(pkg, threads)
    rows = []
    for inputs, tokens in SHAPES:
        texts = texts_of(served.pkg.path / "tokenizer.json", inputs, tokens)
        want = st.encode(texts, batch_size=inputs, convert_to_tensor=True).to_dense().numpy()
        diff = float(np.abs(served(texts) - want).max())
        theirs = partial(st.encode, batch_size=inputs, convert_to_tensor=True)
        m = medians(alternate([served, theirs], reps, lambda call, rep, t=texts: timed(call, t)))
        o, s = m[served], m[theirs]
        rows.append({"shape": (inputs, tokens), "headwise_ms": o, "st_ms": s, "diff": diff})
        log(f"{inputs}×{tokens}: headwise {o:.2f} ms, SparseEncoder {s:.2f} ms, {s / o:.2f}×, max diff {diff:.1e}")
    return rows


def report(rows: list[dict], command: str, threads: int, reps: int) -> str:
    import sentence_transformers
    import torch

    facts = machine_facts("cpu") | {"threads (torch and onnxruntime)": threads, "torch": torch.__version__,
                               "sentence-transformers": sentence_transformers.__version__}
    lines = ["# A sparse encoder (SPLADE): the served fast graph against SparseEncoder", "",
             f"Command: `{command}`", "", facts_table(facts), "",
             f"Medians of {reps} calls per side, alternating. Ratio: SparseEncoder's time / headwise's. fp32 on "
             f"both sides; d_model 384, 6 layers, a vocabulary of {VOCAB:,}.", "",
             "| shape | headwise ms | SparseEncoder ms | ratio | max abs difference |", "|---|---:|---:|---:|---:|"]
    for r in rows:
        n, t = r["shape"]
        lines.append(f"| {n} × {t} | {r['headwise_ms']:.2f} | {r['st_ms']:.2f} | {r['st_ms'] / r['headwise_ms']:.2f}× "
                     f"| {r['diff']:.1e} |")
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(prog="python -m bench.experiments.sparse_speed", description=__doc__.split("\n\n")[0])
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--reps", type=int, default=7)
    ap.add_argument("--out", type=Path, default=None)
    args = ap.parse_args(argv)
    with tempfile.TemporaryDirectory() as work:
        rows = measure(Path(work), args.threads, args.reps, lambda m: print(m, file=sys.stderr, flush=True))
    command = "python -m bench.experiments.sparse_speed " + shlex.join(argv if argv is not None else sys.argv[1:])
    text = report(rows, command, args.threads, args.reps)
    if args.out is not None:
        args.out.write_text(text)
    print(text)


if __name__ == "__main__":
    main()
