"""Build a model package: which kind a checkpoint is, then the one pipeline
(headwise/export/pipeline.py; docs/model-package.md)."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from headwise.export import manifest as mf
from headwise.export.classifier import ClassifierKind
from headwise.export.fill_mask import FillMaskKind
from headwise.export.generative import GenerativeKind
from headwise.export.pipeline import Kind, Options, build
from headwise.export.question_answering import QuestionAnsweringKind
from headwise.export.sentence import SentenceKind
from headwise.export.sparse_embedding import SparseEmbeddingKind
from headwise.export.token_classifier import TokenClassifierKind
from headwise.model.importers import checkpoint_architecture, checkpoint_heads
from headwise.model.sentence import default_checkpoint

KINDS: dict[str, Kind] = {"embedding": SentenceKind(), "classification": ClassifierKind(),
                          "token-classification": TokenClassifierKind(), "question-answering": QuestionAnsweringKind(),
                          "sparse-embedding": SparseEmbeddingKind(), "fill-mask": FillMaskKind(),
                          "generation": GenerativeKind()}


def default_name(checkpoint: Path) -> str:
    if checkpoint.resolve() == default_checkpoint().resolve():
        return "all-minilm-l6-v2"
    return checkpoint.resolve().name.lower()


def kind_of_checkpoint(checkpoint: Path) -> Kind:
    """The first kind in KINDS that says the checkpoint is its (`Kind.matches`: by the head
    config.json's `architectures` names, …ForSequenceClassification: a classifier, ...), else an
    embedding model for an encoder and generation for the others."""
    heads = checkpoint_heads(checkpoint)
    for kind in KINDS.values():
        if kind.matches(checkpoint, heads):
            return kind
    return KINDS["embedding" if checkpoint_architecture(checkpoint) == "encoder" else "generation"]


def kind_of_manifest(manifest: dict) -> Kind:
    """The kind a package was built as; packages from before `task` was written everywhere
    are embeddings (encoders) or generation."""
    return KINDS[manifest.get("task", "embedding" if manifest.get("architecture") == "encoder" else "generation")]


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
    matryoshka_dimensions: tuple[int, ...] = (),
) -> Path:
    """Export `checkpoint` (default: bundled all-MiniLM-L6-v2) to out/name as the kind its
    config.json says (sentence embedding, classification, token classification, question
    answering, sparse embedding, fill-mask or generation). Written to a temporary folder and moved into place only when complete (and
    verified).
    `matryoshka_dimensions`: the sizes an embedding model was trained to be cut to
    (export.prompts), the only ones the service will cut it to."""
    checkpoint = Path(checkpoint) if checkpoint is not None else default_checkpoint()
    options = Options(int8=int8, fp16=fp16, check=check, quality=quality, stsb_path=stsb_path,
                      matryoshka_dimensions=tuple(matryoshka_dimensions))
    return build(kind_of_checkpoint(checkpoint), checkpoint, Path(out), name or default_name(checkpoint),
                 options, progress)


def verify_package(pkg: Path, checkpoint: Path | None = None, stsb_path: Path | None = None,
                   progress: Callable[[str], None] = print, quality: bool = True) -> dict:
    """`headwise verify`: re-check a package of any kind against its checkpoint."""
    options = Options(quality=quality, stsb_path=stsb_path)
    return kind_of_manifest(mf.read(pkg)).verify(Path(pkg), checkpoint, options, progress)
