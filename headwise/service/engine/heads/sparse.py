"""The sparse-embedding head (SPLADE: sentence-transformers' SparseEncoder, task
"sparse-embedding"), with what its requests ask for (SparseParams) and each input's answer
(SparseVector). The graphs answer `sentence_embedding` [B, vocab_size], pooled in the graph
(Formal et al. 2021, "SPLADE", §3: a weight per entry of the vocabulary, max over the text's
tokens of log(1 + ReLU(logit))); an input's answer is its non-zero entries in vocabulary order,
as TEI's /embed_sparse and SparseEncoder's sparse tensors list them.

How many entries are non-zero is known only after the run, so the engine's check before it
counts an answer's records and attention only, and the writer bounds the entries it has."""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

import numpy as np

from headwise.service.engine.heads.embedding import token_ids
from headwise.service.engine.internals import Ablation
from headwise.service.engine.outputs import attention_payload
from headwise.service.engine.params import AttentionSpec, Read
from headwise.service.engine.runtime import Batched, Capability
from headwise.service.engine.size import Size
from headwise.service.engine.tokenizer import Cut, Encoded, TextTokenizer, Truncate
from headwise.service.engine.work import Entry, Inputs
from headwise.service.package import ModelPackage

SPARSE: Capability[Batched] = Capability(
    "sparse-embed", "a sparse embedding model (SPLADE: a SparseEncoder)",
    "{use}; /v1/embed_sparse serves sparse embedding models")


@dataclass(frozen=True)
class SparseParams:
    truncate: Truncate = True  # cut a text at max_len (or "left": at its start); false: 422 when longer
    attention: AttentionSpec | None = None  # over every position of the text
    ablate: Ablation | None = None  # heads removed (service.engine.internals)
    padded_attention: ClassVar[bool] = False
    token_strings: ClassVar[bool] = False  # the answer carries vocabulary entries, not the text's tokens
    max_tokens: ClassVar[None] = None  # cut at max_len only
    special_tokens: ClassVar[bool] = True

    @property
    def analysis(self) -> bool:
        return self.ablate is not None


@dataclass(frozen=True, slots=True)
class SparseVector:
    """One input's answer: its non-zero weights, by vocabulary id ascending."""

    encoding: Encoded
    indices: np.ndarray  # int64 (nnz,)
    values: np.ndarray  # float32 (nnz,)
    attention: dict | None  # service.engine.outputs.attention_payload, over every position


class SparseHead:
    use = "use POST /v1/embed_sparse"
    cut: Cut = "longest_first"  # single texts only
    labelled = False  # its answers name entries of the vocabulary
    capabilities = frozenset({SPARSE})
    described = "a sparse embedding model"

    def __init__(self, package: ModelPackage, tokenizer: TextTokenizer):
        """Nothing of the package is particular to this head: the pooling runs in the graph."""

    def card(self) -> dict:
        return {}  # its pooling ("splade") is on every encoder's card (EncoderRuntime.card)

    def pretokenised(self, inputs: Inputs) -> bool:
        return token_ids(inputs)  # TEI's inputs may be token ids

    def encode(self, tokenizer: TextTokenizer, inputs: Inputs, read: Read) -> list[Encoded]:
        return tokenizer.encode_unchecked(inputs, read.truncate, lazy=True, strings=read.strings)

    def attention_need(self, params: SparseParams, encs: list[Encoded]) -> tuple[int, str]:
        return sum(params.attention.nbytes(e.length) for e in encs), "asked-for attention"

    def answer_size(self, params: SparseParams, encs: list[Encoded]) -> Size:
        spec = params.attention
        blocks = tuple(spec.block(e.length) for e in encs) if spec is not None else ()
        return Size(records=len(encs), blocks=blocks)

    def returned_bytes(self, spec: AttentionSpec, enc: Encoded) -> int:
        return spec.returned_bytes(enc.length)

    def warm_params(self, attention: AttentionSpec | None) -> SparseParams:
        return SparseParams(attention=attention)

    def outputs(self, entries: list[Entry]) -> list[str]:
        return ["sentence_embedding"]

    def answer(self, out: dict, i: int, e: Entry, weights: np.ndarray | None) -> SparseVector:
        p: SparseParams = e.job.params
        row = out["sentence_embedding"][i]  # (vocab_size,)
        nz = np.flatnonzero(row)
        att = attention_payload(weights, e.length, p.attention) if weights is not None else None
        return SparseVector(e.encoding, nz, row[nz].astype(np.float32, copy=False), att)  # row[nz] is a copy
