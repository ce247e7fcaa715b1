"""Each encoder family's served fast graph against sentence-transformers (issue 38's speed
target), on this CPU, in one sitting:

    python -m bench.families --threads 2 --reps 7 --out bench/results/families-cpu.md

Per family: a random checkpoint of a tiny-but-not-trivial size (d_model 384, 6 layers, d_ff
1536; Qwen3 6 query heads over 2 key/value heads of 64; ModernBERT a 128-token window, global
every third layer), built offline with transformers' own config class and saved by
sentence-transformers (the family's usual pooling and normalize), exported by `headwise
export` (fp32; int8 and fp16 left out). Then, alternating call by call, at 16 × 128 tokens and
1 × 20 tokens:

- **sentence-transformers**: `SentenceTransformer.encode` (tokenise, torch forward, pool,
  normalise), torch at `--threads` threads;
- **headwise**: what the service does for the same texts in process: the package's tokenizer
  (`TextTokenizer.encode`), the padded feeds, and the fast graph's run on the service's own
  backend (`OrtBackend`: its session options, `--threads` intra-op threads).

The report gives each side's median ms, the ratio, the cosine of the two answers (they must
agree, or the timing means nothing) and the operators onnxruntime fused into the fast graph
(com.microsoft ones). A family the importers do not know is listed as not supported.
Speed is a benchmark, never a test: this runs by hand.
"""

from __future__ import annotations

import argparse
import shlex
import sys
import tempfile
import time
from collections import Counter
from functools import partial
from pathlib import Path

import numpy as np

from bench.alternate import alternate, medians
from bench.facts import machine_facts
from bench.report import facts_table

RESULTS = Path(__file__).resolve().parent / "results"
SHAPES = ((16, 128), (1, 20))  # (inputs, tokens each)
SIZE = {"hidden_size": 384, "num_attention_heads": 12, "num_hidden_layers": 6, "intermediate_size": 1536}


def _bert(raw: Path, vocab: int):
    from transformers import BertConfig, BertModel

    return BertModel(BertConfig(vocab_size=vocab, **SIZE, max_position_embeddings=512), add_pooling_layer=False)


def _roberta(raw: Path, vocab: int):
    from transformers import XLMRobertaConfig, XLMRobertaModel

    cfg = XLMRobertaConfig(vocab_size=vocab, **SIZE, max_position_embeddings=514, type_vocab_size=1,
                           pad_token_id=1, bos_token_id=0, eos_token_id=2)
    return XLMRobertaModel(cfg, add_pooling_layer=False)


def _distilbert(raw: Path, vocab: int):
    from transformers import DistilBertConfig, DistilBertModel

    return DistilBertModel(DistilBertConfig(vocab_size=vocab, dim=384, n_heads=12, n_layers=6, hidden_dim=1536,
                                            max_position_embeddings=512))


def _mpnet(raw: Path, vocab: int):
    from transformers import MPNetConfig, MPNetModel

    return MPNetModel(MPNetConfig(vocab_size=vocab, **SIZE, max_position_embeddings=514, pad_token_id=1),
                      add_pooling_layer=False)


def _qwen3(raw: Path, vocab: int):
    from transformers import Qwen3Config, Qwen3Model

    cfg = Qwen3Config(vocab_size=vocab, hidden_size=384, num_attention_heads=6, num_key_value_heads=2, head_dim=64,
                      num_hidden_layers=6, intermediate_size=1536, max_position_embeddings=512)
    return Qwen3Model(cfg)


def _modernbert(raw: Path, vocab: int):
    from transformers import ModernBertConfig, ModernBertModel

    cfg = ModernBertConfig(vocab_size=vocab, hidden_size=384, num_attention_heads=6, num_hidden_layers=6,
                           intermediate_size=1152, max_position_embeddings=512, local_attention=128,
                           global_attn_every_n_layers=3, pad_token_id=0, bos_token_id=2, eos_token_id=3,
                           cls_token_id=2, sep_token_id=3)
    return ModernBertModel(cfg)


# family → (model_type, the model, tokenizer kind, pooling)
FAMILIES = {
    "bert": ("bert", _bert, "bert", "mean"),
    "xlm-roberta": ("xlm-roberta", _roberta, "roberta", "cls"),
    "distilbert": ("distilbert", _distilbert, "bert", "mean"),
    "mpnet": ("mpnet", _mpnet, "roberta", "mean"),
    "qwen3": ("qwen3", _qwen3, "qwen", "lasttoken"),
    "modernbert": ("modernbert", _modernbert, "bert", "cls"),
}


def build(family: str, root: Path):
    """The family's checkpoint saved by sentence-transformers → (its dir, the SentenceTransformer)."""
    import torch

    from tests.fixtures import families as fx

    _, make, kind, pooling = FAMILIES[family]
    raw = root / "hf"
    raw.mkdir(parents=True)
    specials, template, extra = {
        "bert": (fx.BERT_SPECIALS, fx.BERT_TEMPLATE, {}),
        "roberta": (fx.ROBERTA_SPECIALS, fx.ROBERTA_TEMPLATE, {}),
        "qwen": (fx.QWEN_SPECIALS, fx.QWEN_TEMPLATE, {"padding_side": "left"}),
    }[kind]
    vocab = fx.bpe_tokenizer(raw, specials, template, max_len=512, **extra)
    torch.manual_seed(0)
    model = make(raw, vocab).eval()
    fx.randomise_norms(model)
    model.save_pretrained(str(raw))
    return root / "st", fx.save_sentence_transformer(raw, root / "st", pooling)


def texts_of(tokenizer_file: Path, inputs: int, tokens: int) -> list[str]:
    """`inputs` texts of exactly `tokens` tokens each (specials included), each from the
    checkpoint's words in another order."""
    from tokenizers import Tokenizer

    from bench.texts import text_of_length
    from tests.fixtures.tiny import WORDS

    tok = Tokenizer.from_file(str(tokenizer_file))
    return [text_of_length(tok, tokens, WORDS[i:] + WORDS[:i]) for i in range(inputs)]


class Served:
    """The service's in-process path for a batch of texts: tokenise, pad, run the fast graph."""

    def __init__(self, package_dir: Path, threads: int):
        from headwise.service.backends.onnxruntime import OrtBackend
        from headwise.service.engine.tokenizer import TextTokenizer
        from headwise.service.package import load_package
        from headwise.service.settings import Settings

        self.pkg = load_package(package_dir)
        settings = Settings(models_dir=package_dir.parent, provider="cpu", precision="fp32", threads=threads,
                            analytics_threads=0)
        self.backend = OrtBackend(self.pkg, settings)
        self.tokenizer = TextTokenizer(self.pkg.path / "tokenizer.json", self.pkg.max_len)

    def __call__(self, texts: list[str]) -> np.ndarray:
        encs = self.tokenizer.encode(texts)
        t = max(e.length for e in encs)
        ids = np.full((len(encs), t), self.pkg.pad_id, dtype=np.int64)
        mask = np.zeros((len(encs), t), dtype=np.int64)
        for i, e in enumerate(encs):
            ids[i, :e.length], mask[i, :e.length] = e.ids, 1
        feeds = {"input_ids": ids, "attention_mask": mask, "token_type_ids": np.zeros_like(ids)}
        return self.backend.run("embed", feeds, ["sentence_embedding"])["sentence_embedding"]

    def fused(self) -> str:
        import onnx

        graph = onnx.load(str(self.pkg.variants[self.backend.variants["embed"]].file), load_external_data=False)
        ops = Counter(n.op_type for n in graph.graph.node if n.domain == "com.microsoft")
        return ", ".join(f"{op} × {n}" for op, n in sorted(ops.items())) or "none"


def timed(call, texts) -> float:
    """One call's wall time in ms."""
    t0 = time.perf_counter()
    call(texts)
    return (time.perf_counter() - t0) * 1e3


def measure(family: str, work: Path, threads: int, reps: int, log) -> dict:
    import torch

    from headwise.export.package import build_package
    from headwise.model.importers.common import CheckpointError

    torch.set_num_threads(threads)
    ckpt, st = build(family, work / family)
    try:
        pkg = build_package(ckpt, work / "models", family, int8=False, fp16=False, quality=False,
                            progress=lambda m: None)
    except CheckpointError as e:
        return {"family": family, "refused": str(e)}
    served = Served(pkg, threads)
    row = {"family": family, "fused": served.fused(), "shapes": {}}
    for inputs, tokens in SHAPES:
        texts = texts_of(served.pkg.path / "tokenizer.json", inputs, tokens)
        want = st.encode(texts, batch_size=inputs, convert_to_numpy=True)
        got = served(texts)
        cos = float(np.min(np.sum(want * got, 1) / np.linalg.norm(want, axis=1) / np.linalg.norm(got, axis=1)))
        theirs = partial(st.encode, batch_size=inputs)
        m = medians(alternate([served, theirs], reps, lambda call, rep, t=texts: timed(call, t)))
        o, s = m[served], m[theirs]
        row["shapes"][(inputs, tokens)] = {"headwise_ms": o, "st_ms": s, "ratio": s / o, "cosine": cos}
        log(f"{family} {inputs}×{tokens}: headwise {o:.2f} ms, sentence-transformers {s:.2f} ms, "
            f"{s / o:.2f}×, cosine {cos:.7f}")
    return row


def report(rows: list[dict], command: str, threads: int, reps: int) -> str:
    import sentence_transformers
    import torch

    facts = machine_facts("cpu") | {"threads (torch and onnxruntime)": threads, "torch": torch.__version__,
                               "sentence-transformers": sentence_transformers.__version__}
    lines = ["# Encoder families: the served fast graph against sentence-transformers", "",
             f"Command: `{command}`", "", facts_table(facts), "",
             f"Medians of {reps} calls per side, alternating. Ratio: sentence-transformers' time / headwise's "
             "(≥ 1.5 is issue 38's target). fp32 on both sides.", "",
             "| family | shape | headwise ms | sentence-transformers ms | ratio | cosine (min) | fused by onnxruntime |",
             "|---|---|---:|---:|---:|---:|---|"]
    for r in rows:
        if "refused" in r:
            lines.append(f"| {r['family']} | – | – | – | – | – | not supported: {r['refused'][:120]} |")
            continue
        for (n, t), m in r["shapes"].items():
            lines.append(f"| {r['family']} | {n} × {t} | {m['headwise_ms']:.2f} | {m['st_ms']:.2f} | "
                         f"{m['ratio']:.2f}× | {m['cosine']:.7f} | {r['fused']} |")
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(prog="python -m bench.families", description=__doc__.split("\n\n")[0])
    ap.add_argument("--families", default=",".join(FAMILIES), help="comma-separated, of: " + ", ".join(FAMILIES))
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--reps", type=int, default=7)
    ap.add_argument("--out", type=Path, default=RESULTS / "families-cpu.md")
    a = ap.parse_args(argv)
    command = "python -m bench.families " + shlex.join(argv if argv is not None else sys.argv[1:])
    rows = []
    with tempfile.TemporaryDirectory(prefix="headwise-families-") as work:
        for family in a.families.split(","):
            if family not in FAMILIES:
                ap.error(f"unknown family {family!r}; known: {', '.join(FAMILIES)}")
            rows.append(measure(family, Path(work), a.threads, a.reps, lambda m: print(m, flush=True)))
    a.out.write_text(report(rows, command, a.threads, a.reps))
    print(f"wrote {a.out}")


if __name__ == "__main__":
    main()
