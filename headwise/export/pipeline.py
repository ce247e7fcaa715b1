"""The one export pipeline every package goes through (docs/model-package.md):

    load → export → optimise → quantise → manifest → verify → measure

A Kind (sentence.py, classifier.py, token_classifier.py, generative.py) supplies what
differs: how the checkpoint loads, which graphs it exports, which variants and manifest facts
it has, how it is verified; a stage it does not offer is left out. The pipeline numbers the stages, times them, writes
the manifest's common fields and builds the package in a temporary folder that is moved into
place only when every stage has passed.
"""

from __future__ import annotations

import datetime as _dt
import os
import shutil
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

from headwise.export import manifest as mf
from headwise.export.graphs import OPSET
from headwise.export.prompts import declared_facts

EXPORTER = "headwise 0.1.0"
Progress = Callable[[str], None]


@dataclass(frozen=True)
class Options:
    int8: bool = True  # fast.int8.onnx, where the kind has one
    fp16: bool = True  # fast.fp16.onnx, where the kind has one
    check: bool = True  # verify parity against torch
    quality: bool = True  # STS-B figures and CPU speed (off for untrained test models)
    stsb_path: Path | None = None
    # the Matryoshka dimensions the model was trained for (embedding packages; prompts.py)
    matryoshka_dimensions: tuple[int, ...] = ()


@dataclass(frozen=True)
class Variant:
    """One graph file of a package, as the manifest lists it."""

    file: str
    precision: str
    inputs: list[dict]
    outputs: list[dict]
    extra: dict = field(default_factory=dict)  # more keys of the manifest entry ("scheme", "graph")


class Kind:
    """What one kind of package supplies. `optimise`, `quantise` and `measure` return None
    where the kind has no such stage (the pipeline then leaves it out of the count)."""

    task: str  # the manifest's "task"
    head: str | None = None  # how the transformers class of its head ends (…ForSequenceClassification), if any

    def matches(self, checkpoint: Path, heads: list[str]) -> bool:
        """Whether `checkpoint` is of this kind, given config.json's `architectures` (`heads`):
        by default, whether one of them ends with `head`. A kind that shares a head with another
        (a sparse encoder is a masked LM) reads the checkpoint's other files too."""
        return self.head is not None and any(h.endswith(self.head) for h in heads)

    def notes(self, options: Options) -> list[str]:
        """Lines to say before the export: options this kind ignores."""
        return []

    def load(self, checkpoint: Path):
        raise NotImplementedError

    def export(self, loaded, work: Path) -> None:
        raise NotImplementedError

    def export_label(self, loaded) -> str:
        raise NotImplementedError

    def optimise(self, options: Options) -> Callable[..., dict] | None:
        """fn(loaded, work) → fusion counts, writing the optimised graphs."""
        return None

    def quantise(self, options: Options) -> Callable[..., object] | None:
        return None

    def variants(self, loaded, options: Options) -> dict[str, Variant]:
        raise NotImplementedError

    def facts(self, loaded) -> dict:
        """The manifest's keys that depend on the model: family ... vocab_size, pooling, ...;
        "tokenizer" here holds the entries beside file and sha256 (pad_id, pairs)."""
        raise NotImplementedError

    def verify(self, pkg: Path, checkpoint: Path | None, options: Options, progress: Progress) -> dict:
        raise NotImplementedError

    def measure(self, options: Options) -> Callable[[Path, dict, Progress], dict] | None:
        """fn(pkg, manifest, progress) → the manifest's "speed"."""
        return None


class Steps:
    """Numbered progress lines with timings: `[2/5] export ... 1.9 s`."""

    def __init__(self, total: int, out: Progress):
        self.total, self.n, self.out = total, 0, out

    def run(self, label: str, fn: Callable, *args, **kw):
        self.n += 1
        t0 = time.perf_counter()
        self.out(f"[{self.n}/{self.total}] {label} ...")
        result = fn(*args, **kw)
        self.out(f"      done in {time.perf_counter() - t0:.1f} s")
        return result


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


def exporter_version() -> str:
    import onnx
    import onnxruntime
    import torch

    return (f"{EXPORTER} (torch {torch.__version__.split('+')[0]}, onnx {onnx.__version__}, "
            f"onnxruntime {onnxruntime.__version__})")


def manifest(kind: Kind, loaded, name: str, work: Path, variants: dict[str, Variant], fusion: dict | None) -> dict:
    """The manifest of a package whose files are all in `work`: the kind's facts between the
    fields every package carries (manifest.COMMON_FIELDS)."""
    facts = kind.facts(loaded)
    tokenizer = {"file": "tokenizer.json", "sha256": mf.sha256(work / "tokenizer.json"), **facts.pop("tokenizer")}
    return {
        "schema_version": mf.SCHEMA_VERSION, "name": name, "version": "1", "task": kind.task,
        **facts,
        "tokenizer": tokenizer,
        "inputs": {v: spec.inputs for v, spec in variants.items()},
        "outputs": {v: spec.outputs for v, spec in variants.items()},
        "variants": {v: {"file": spec.file, "precision": spec.precision, "sha256": mf.sha256(work / spec.file),
                         "outputs": [o["name"] for o in spec.outputs], **spec.extra}
                     for v, spec in variants.items()},
        "parity": {},
        **({"fusion": fusion} if fusion is not None else {}),
        "opset": OPSET,
        "exporter_version": exporter_version(),
        "created_at": _dt.datetime.now(_dt.timezone.utc).replace(microsecond=0).isoformat(),
    }


def build(kind: Kind, checkpoint: Path, out: Path, name: str, options: Options, progress: Progress) -> Path:
    """Run every stage `kind` offers for `checkpoint` and write out/name."""
    optimise, quantise, measure = kind.optimise(options), kind.quantise(options), kind.measure(options)
    verify = kind.verify if options.check else None
    for line in kind.notes(options):
        progress(f"note: {line}")
    steps = Steps(2 + sum(f is not None for f in (optimise, quantise, verify, measure)), progress)
    indent = lambda m: progress("      " + m)  # noqa: E731
    with staged(out, name) as work:
        loaded = steps.run(f"load {checkpoint}", kind.load, checkpoint)
        declared = declared_facts(kind.task, loaded, checkpoint, options)  # prompts, Matryoshka
        steps.run(f"export to ONNX ({kind.export_label(loaded)})", kind.export, loaded, work)
        fusion = None
        if optimise is not None:
            label = "optimise (fuse attention, SkipLayerNorm, Gelu)" + (" + fp16" if options.fp16 else "")
            fusion = steps.run(label, optimise, loaded, work)
            indent("fused operators: " + ", ".join(f"{k}={v}" for k, v in sorted(fusion.items())))
        if quantise is not None:
            steps.run("quantise (int8, per-token scales)" if options.int8 else "quantise (skipped: --no-int8)",
                      quantise, work)
        shutil.copyfile(checkpoint / "tokenizer.json", work / "tokenizer.json")
        mf.write(work, {**manifest(kind, loaded, name, work, kind.variants(loaded, options), fusion), **declared})
        if verify is not None:
            steps.run("verify parity against torch", verify, work, checkpoint, options, indent)
        if measure is not None:
            written = mf.read(work)
            speed = steps.run("measure CPU speed per precision", measure, work, written, indent)
            mf.write(work, {**written, "speed": speed})
    return Path(out) / name
