"""Build a model package: load → export → optimise → quantise → verify (docs/model-package.md)."""

from __future__ import annotations

import datetime as _dt
import os
import shutil
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

import onnx
import onnxruntime
import torch

from headwise.export import manifest as mf
from headwise.export.graphs import OPSET, io_spec, to_onnx
from headwise.export.optimize import optimize
from headwise.export.quantize import SCHEME as INT8_SCHEME
from headwise.export.quantize import quantize_int8
from headwise.export.speed import measure as measure_speed
from headwise.export.speed import speed_lines
from headwise.export.verify import verify
from headwise.model.importers.common import checkpoint_architecture, checkpoint_task
from headwise.model.sentence import default_checkpoint, load_sentence_model

EXPORTER = "headwise 0.1.0"


def default_name(checkpoint: Path) -> str:
    if checkpoint.resolve() == default_checkpoint().resolve():
        return "all-minilm-l6-v2"
    return checkpoint.resolve().name.lower()


@contextmanager
def staged(out: Path, name: str) -> Iterator[Path]:
    """A temporary folder beside out/name, moved into place when the block completes and
    removed if it fails, so a package folder is never half written."""
    final = Path(out) / name
    work = Path(out) / f".{name}.{os.getpid()}.partial"
    shutil.rmtree(work, ignore_errors=True)
    work.mkdir(parents=True)
    try:
        yield work
        shutil.rmtree(final, ignore_errors=True)
        work.replace(final)
    except BaseException:
        shutil.rmtree(work, ignore_errors=True)
        raise


class Steps:
    """Numbered progress lines with timings: `[2/5] export ... 1.9 s`."""

    def __init__(self, total: int, out: Callable[[str], None]):
        self.total, self.n, self.out = total, 0, out

    def run(self, label: str, fn: Callable, *args, **kw):
        self.n += 1
        t0 = time.perf_counter()
        self.out(f"[{self.n}/{self.total}] {label} ...")
        result = fn(*args, **kw)
        self.out(f"      done in {time.perf_counter() - t0:.1f} s")
        return result


def build_package(
    checkpoint: Path | None = None,
    out: Path = Path("models"),
    name: str | None = None,
    int8: bool = True,
    fp16: bool = True,
    check: bool = True,
    stsb_path: Path | None = None,
    progress: Callable[[str], None] = print,
    quality: bool = True,
) -> Path:
    """Export `checkpoint` (default: bundled all-MiniLM-L6-v2) to out/name. Written to a
    temporary folder and moved into place only when complete (and verified). Decoder and
    encoder-decoder checkpoints go to headwise/export/generative.py (int8, fp16, quality: encoders only)."""
    checkpoint = Path(checkpoint) if checkpoint is not None else default_checkpoint()
    name = name or default_name(checkpoint)
    if checkpoint_architecture(checkpoint) != "encoder":  # GPT-2, Marian: headwise/export/generative.py
        from headwise.export.generative import build_generative_package

        if int8 or fp16:
            progress("note: generative packages are fp32 only for now; --int8/--fp16 are ignored")
        return build_generative_package(checkpoint, out, name, Steps(3 if check else 2, progress), check, progress)
    if checkpoint_task(checkpoint) == "classification":  # cross-encoders, classifiers
        from headwise.export.classifier import build_classifier_package

        if int8:
            progress("note: classification packages have fp32 and fp16 variants, no int8")
        steps = Steps(3 + check, progress)
        with staged(out, name) as work:
            build_classifier_package(checkpoint, work, name, fp16, check, steps, progress)
        return Path(out) / name
    speed = check and quality and int8
    steps = Steps(4 + check + speed, progress)
    with staged(out, name) as work:
        loaded = steps.run(f"load {checkpoint}", load_sentence_model, checkpoint)
        cfg = loaded.model.config

        def export_graphs() -> None:
            to_onnx(loaded.model, work / "raw.onnx", with_attention=False)
            to_onnx(loaded.model, work / "attention.onnx", with_attention=True)

        steps.run("export to ONNX (fast + attention graphs)", export_graphs)
        fusion = steps.run(
            "optimise (fuse attention, SkipLayerNorm, Gelu)" + (" + fp16" if fp16 else ""),
            optimize, work / "raw.onnx", work / "fast.onnx", cfg.n_heads, cfg.d_model,
            work / "fast.fp16.onnx" if fp16 else None,
        )
        progress("      fused operators: " + ", ".join(f"{k}={v}" for k, v in sorted(fusion.items())))
        (work / "raw.onnx").unlink()
        if int8:
            steps.run("quantise (int8, per-token scales)", quantize_int8, work / "fast.onnx", work / "fast.int8.onnx")
        else:
            steps.run("quantise (skipped: --no-int8)", lambda: None)
        shutil.copyfile(checkpoint / "tokenizer.json", work / "tokenizer.json")
        manifest = _manifest(loaded, name, work, fusion, int8, fp16)
        mf.write(work, manifest)
        if check:
            steps.run(
                "verify parity against torch", verify, work, checkpoint, stsb_path,
                lambda m: progress("      " + m), quality,
            )
        if speed:
            written = mf.read(work)
            measured = steps.run("measure CPU speed per precision", measure_speed, work, written)
            for line in speed_lines(measured):
                progress("      " + line)
            mf.write(work, {**written, "speed": measured})
    return Path(out) / name


def _manifest(loaded, name: str, work: Path, fusion: dict, int8: bool, fp16: bool) -> dict:
    cfg = loaded.model.config
    fast_outputs = ["sentence_embedding", "last_hidden_state"]
    variants = {"fast": ("fast.onnx", "fp32", fast_outputs)}
    if int8:
        variants["fast.int8"] = ("fast.int8.onnx", "int8", fast_outputs)
    notes = {"fast.int8": INT8_SCHEME}
    if fp16:
        variants["fast.fp16"] = ("fast.fp16.onnx", "fp16", fast_outputs)
    variants["attention"] = ("attention.onnx", "fp32", [*fast_outputs, "attentions", "attentions_f16"])
    inputs, outputs = {}, {}
    for v in variants:
        inputs[v], outputs[v] = io_spec(loaded.model, with_attention=v == "attention")
    return {
        "schema_version": mf.SCHEMA_VERSION,
        "name": name,
        "version": "1",
        "family": loaded.family,
        "architecture": loaded.architecture,
        "source": loaded.source,
        "n_layers": cfg.n_layers,
        "n_heads": cfg.n_heads,
        "d_model": cfg.d_model,
        "max_len": loaded.model.max_len,
        "vocab_size": cfg.vocab_size,
        "pooling": loaded.model.pooling.mode,
        "normalize": loaded.model.pooling.normalize,
        "tokenizer": {"file": "tokenizer.json", "sha256": mf.sha256(work / "tokenizer.json"),
                      "pad_id": loaded.tokenizer.pad_id},
        "inputs": inputs,
        "outputs": outputs,
        "variants": {
            v: {"file": f, "precision": p, "sha256": mf.sha256(work / f), "outputs": o,
                **({"scheme": notes[v]} if v in notes else {})}
            for v, (f, p, o) in variants.items()
        },
        "parity": {},
        "fusion": fusion,
        "opset": OPSET,
        "exporter_version": f"{EXPORTER} (torch {torch.__version__.split('+')[0]}, onnx {onnx.__version__}, "
        f"onnxruntime {onnxruntime.__version__})",
        "created_at": _dt.datetime.now(_dt.timezone.utc).replace(microsecond=0).isoformat(),
    }
