"""What the encoder kinds (sentence.py, classifier.py, token_classifier.py) share: an
EncoderModel exported as a fast graph, fused by onnxruntime's optimiser (plus an fp16 copy for
CUDA and, where the kind offers one, a per-token int8 copy for CPUs), and one graph for looking
inside: the analysis graph, which outputs every head's weights and every layer's hidden states
and takes a head mask (graphs.AnalysisGraph); the server answers attention from it too.
Verified by verify.py. Packages exported before 2026-11-28 also carry an attention graph, which
servers now ignore."""

from __future__ import annotations

from pathlib import Path

from headwise.export.graphs import io_spec, to_onnx
from headwise.export.optimize import optimize
from headwise.export.pipeline import Kind, Options, Variant
from headwise.export.quantize import SCHEME as INT8_SCHEME
from headwise.export.quantize import quantize_int8
from headwise.export.verify import PARITY_SENTENCES, verify
from headwise.model.importers import CheckpointError
from headwise.model.sentence import LoadedModel, load_encoder_model


def attention_pattern(cfg) -> str:
    """Which keys a query sees: "bidirectional" (BERT), "causal" (decoder-style embedding
    models: Qwen3) or "local/global" (ModernBERT's alternating sliding-window layers)."""
    if cfg.causal:
        return "causal"
    return "local/global" if cfg.local_window is not None else "bidirectional"


class EncoderKind(Kind):
    outputs: tuple[str, ...]  # the fast graph's outputs; the analysis graph adds its own
    int8: bool  # whether the kind has a fast.int8 variant
    parity_inputs: list = PARITY_SENTENCES  # what verify compares the graphs on: texts, or texts and pairs

    def load(self, checkpoint: Path) -> LoadedModel:
        loaded = load_encoder_model(checkpoint)
        if loaded.task != self.task:
            raise CheckpointError(f"{checkpoint}: a {loaded.task} model, not a {self.task} one")
        return loaded

    def export_label(self, loaded: LoadedModel) -> str:
        return f"fast and analysis graphs: {', '.join(self.outputs)}"

    def export(self, loaded: LoadedModel, work: Path) -> None:
        to_onnx(loaded.model, work / "raw.onnx", self.outputs, with_attention=False)
        to_onnx(loaded.model, work / "analysis.onnx", self.outputs, with_attention=False, analysis=True)

    def optimise(self, options: Options):
        def fuse(loaded: LoadedModel, work: Path) -> dict:
            cfg = loaded.model.config
            fusion = optimize(work / "raw.onnx", work / "fast.onnx", cfg.n_heads, cfg.d_model,
                              work / "fast.fp16.onnx" if options.fp16 else None)
            (work / "raw.onnx").unlink()
            return fusion

        return fuse

    def quantise(self, options: Options):
        def int8(work: Path) -> None:
            if options.int8:
                quantize_int8(work / "fast.onnx", work / "fast.int8.onnx")

        return int8 if self.int8 else None

    def variant(self, loaded: LoadedModel, file: str, precision: str, with_attention: bool = False,
                analysis: bool = False, **extra) -> Variant:
        return Variant(file, precision, *io_spec(loaded.model, self.outputs, with_attention, analysis), extra)

    def variants(self, loaded: LoadedModel, options: Options) -> dict[str, Variant]:
        out = {"fast": self.variant(loaded, "fast.onnx", "fp32")}
        if self.int8 and options.int8:
            out["fast.int8"] = self.variant(loaded, "fast.int8.onnx", "int8", scheme=INT8_SCHEME)
        if options.fp16:
            out["fast.fp16"] = self.variant(loaded, "fast.fp16.onnx", "fp16")
        out["analysis"] = self.variant(loaded, "analysis.onnx", "fp32", analysis=True)
        return out

    def facts(self, loaded: LoadedModel) -> dict:
        cfg = loaded.model.config
        return {"family": loaded.family, "architecture": loaded.architecture, "source": loaded.source,
                "n_layers": cfg.n_layers, "n_heads": cfg.n_heads, "d_model": cfg.d_model,
                "max_len": loaded.max_len, "vocab_size": cfg.vocab_size, "attention_pattern": attention_pattern(cfg),
                "tokenizer": {"pad_id": loaded.tokenizer.pad_id}}

    def verify(self, pkg: Path, checkpoint: Path | None, options: Options, progress) -> dict:
        return verify(pkg, checkpoint, options.stsb_path, progress, options.quality, self.parity_inputs)
