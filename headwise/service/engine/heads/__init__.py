"""What an encoder model's graphs answer, beside its shared encoder (EncoderRuntime): its
head. A head owns what is particular to its kind: the inputs it takes and how they are
tokenised, the graph outputs it reads and each input's answer cut from them, what an answer
holds (counted, service.engine.size) and the attention the budget counts, and the capabilities
it declares. The encoder keeps
everything else (batchers, limits, warm-up, metrics); the engine dispatches on capabilities.

A package's `task` picks its head (`HEADS`), at load only: a task no head serves is refused
then, as is a labelled head's package without labels."""

from __future__ import annotations

from typing import Protocol

import numpy as np

from headwise.service.engine.heads.embedding import EmbeddingHead
from headwise.service.engine.heads.extractive import SpanHead
from headwise.service.engine.heads.logits import LogitsHead
from headwise.service.engine.heads.masked import MaskHead
from headwise.service.engine.heads.sparse import SparseHead
from headwise.service.engine.heads.tokens import TokenHead
from headwise.service.engine.params import AttentionSpec, Read, RequestParams
from headwise.service.engine.runtime import Capability
from headwise.service.engine.size import Size
from headwise.service.engine.tokenizer import Cut, Encoded, TextTokenizer
from headwise.service.engine.work import Entry, Inputs
from headwise.service.package import GENERATION, ModelPackage, PackageError


class Head(Protocol):
    capabilities: frozenset[Capability]
    described: str  # what refusals call the model
    use: str  # what it serves, as refusals say
    cut: Cut  # how a pair it reads is cut at max_len (TextTokenizer.encode_items)
    labelled: bool  # its package must list labels (its answers name them)

    def card(self) -> dict: ...  # the facts /v1/models shows of this kind

    # on the tokenising thread
    def pretokenised(self, inputs: Inputs) -> bool: ...  # token-id lists, used as they are

    # read.strings false: no input's answer carries token strings or offsets (a head may read
    # faster); a head whose params fix a field (ClassVar) may leave it unread
    def encode(self, tokenizer: TextTokenizer, inputs: Inputs, read: Read) -> list[Encoded]: ...

    def attention_need(self, params: RequestParams, encs: list[Encoded]) -> tuple[int, str]: ...

    def answer_size(self, params: RequestParams, encs: list[Encoded]) -> Size: ...

    def returned_bytes(self, spec: AttentionSpec, enc: Encoded) -> int: ...

    # on the inference thread
    def warm_params(self, attention: AttentionSpec | None) -> RequestParams: ...

    def outputs(self, entries: list[Entry]) -> list[str]: ...  # graph outputs besides attention

    def answer(self, out: dict, i: int, entry: Entry, weights: np.ndarray | None): ...


# task → its head, made from the package and the model's tokenizer (a tagger's answers leave out
# the tokenizer's special tokens)
HEADS: dict[str, type[Head]] = {
    "embedding": EmbeddingHead,
    "classification": LogitsHead,
    "token-classification": TokenHead,
    "question-answering": SpanHead,
    "fill-mask": MaskHead,
    "sparse-embedding": SparseHead,
}


def check_package(package: ModelPackage) -> None:
    """PackageError unless the package generates or a head serves its task, with the labels a
    labelled head answers with: checked before anything starts (`headwise serve`) and when
    the engine loads the package."""
    if package.task == GENERATION:
        return
    mf = package.path / "manifest.json"
    if package.task not in HEADS:
        raise PackageError(f"{mf}: task {package.task[:40]!r} is not served ({', '.join([*HEADS, GENERATION])})")
    if HEADS[package.task].labelled and not package.labels:
        raise PackageError(f"{mf}: a {package.task} package needs architecture 'encoder' and "
                           "'labels', a non-empty list of distinct strings")


def head_for(package: ModelPackage, tokenizer: TextTokenizer) -> Head:
    """The head `package.task` names (check_package first)."""
    check_package(package)
    return HEADS[package.task](package, tokenizer)


__all__ = ["HEADS", "EmbeddingHead", "Head", "LogitsHead", "MaskHead", "SpanHead", "SparseHead", "TokenHead", "check_package", "head_for"]
