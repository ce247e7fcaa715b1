"""The embedding head: sentence embeddings (the graph's pooled output, or pooled here when a
request asks for other normalisation) and token embeddings (the last hidden state), for
/v1/embed, /v1/embeddings, TEI's /embed and /embed_all, and analytics; with the analysis graph,
chosen layers' hidden states.

Pooling here is exact only without Dense layers: with them, an unnormalised model's vector is
normalised here, and a normalised one cannot be served unnormalised (refused: check)."""

from __future__ import annotations

import numpy as np

from headwise.service.engine.outputs import REPOOLED, attention_payload, pool
from headwise.service.engine.params import AttentionSpec, Embedded, EmbedParams, Read
from headwise.service.engine.runtime import Capability
from headwise.service.engine.size import Size
from headwise.service.engine.tokenizer import Cut, Encoded, TextTokenizer
from headwise.service.engine.work import Entry, Inputs
from headwise.service.errors import Validation
from headwise.service.package import ModelPackage


def token_ids(inputs: Inputs) -> bool:
    """Pre-tokenised inputs (lists of ids, e.g. OpenAI's token-array input) rather than texts."""
    return bool(inputs) and not isinstance(inputs[0], str)


class EmbeddingHead:
    capabilities = frozenset({Capability.EMBED})
    described = "an embedding model"
    use = "use POST /v1/embed"
    cut: Cut = "longest_first"  # single texts only
    labelled = False

    def __init__(self, package: ModelPackage, tokenizer: TextTokenizer | None):
        self.name, self.pooling, self.normalize = package.name, package.pooling, package.normalize
        self.d_model = max(package.d_model, package.embedding_dim)  # a vector's size, either kind
        self.repools = package.dense_layers == 0 and self.pooling in REPOOLED

    def check(self, params: EmbedParams) -> None:
        """Refuse what the graph's output cannot give: a normalised model's vector unnormalised,
        where it cannot be pooled again here."""
        if params.sentence and not params.normalize and self.normalize and not self.repools:
            raise Validation(f"normalize=false: model {self.name!r} normalises its embeddings inside its graph, "
                             "after a Dense layer, so the vector before normalisation cannot be served; "
                             "send normalize=true", field="normalize")

    def card(self) -> dict:
        return {}  # pooling and normalize are on every encoder's card (EncoderRuntime.card)

    def pretokenised(self, inputs: Inputs) -> bool:
        return token_ids(inputs)

    def encode(self, tokenizer: TextTokenizer, inputs: Inputs, read: Read) -> list[Encoded]:
        """Unchecked (the encoder checks); strings and offsets built later, for the jobs whose
        answer carries them. `read.strings` false: no input's answer carries them, and the texts are
        read without offsets (TextTokenizer.encode_unchecked)."""
        return tokenizer.encode_unchecked(inputs, read.truncate, read.special_tokens, lazy=True, strings=read.strings,
                                          max_tokens=read.max_tokens)

    def attention_need(self, params: EmbedParams, encs: list[Encoded]) -> tuple[int, str]:
        spec = params.attention
        if params.padded_attention:
            return len(encs) * spec.nbytes(max(e.length for e in encs)), "the padded attention tensor"
        return sum(spec.nbytes(e.length) for e in encs), "asked-for attention"

    def answer_size(self, params: EmbedParams, encs: list[Encoded]) -> Size:
        """What these inputs answer: each embedding (one vector, or one per token), each input's
        tokens and offsets, its attention and hidden states."""
        t = 0
        for e in encs:
            t += e.length
        vectors = (t if params.tokens else 0) + (len(encs) if params.sentence else 0)
        blocks = ()
        if params.attention is not None:
            blocks += tuple(params.attention.block(e.length) for e in encs)
        if params.hidden is not None:
            blocks += tuple(params.hidden.block(e.length, self.d_model) for e in encs)
        return Size(vectors * self.d_model, 0, t, 0, 0, 0, blocks)  # values, tokens and blocks

    def returned_bytes(self, spec: AttentionSpec, enc: Encoded) -> int:
        return spec.returned_bytes(enc.length)

    def warm_params(self, attention: AttentionSpec | None) -> EmbedParams:
        return EmbedParams(sentence=False, tokens=True, attention=attention)

    def _pooled(self, p: EmbedParams) -> bool:
        """Whether the graph's pooled output answers (normalised here when it is not)."""
        return p.sentence and (p.normalize == self.normalize or not self.repools)

    def outputs(self, entries: list[Entry]) -> list[str]:
        out = []
        if any(self._pooled(e.job.params) for e in entries):
            out.append("sentence_embedding")
        if any(e.job.params.tokens or (e.job.params.sentence and not self._pooled(e.job.params)) for e in entries):
            out.append("last_hidden_state")
        if any(e.job.params.hidden is not None for e in entries):
            out.append("hidden_states")
        return out

    def answer(self, out: dict, i: int, e: Entry, weights: np.ndarray | None) -> Embedded:
        p: EmbedParams = e.job.params
        t = e.length
        tokens = np.ascontiguousarray(out["last_hidden_state"][i, :t]) if p.tokens else None
        sentence = None
        if self._pooled(p):
            sentence = out["sentence_embedding"][i]
            if p.normalize and not self.normalize:
                sentence = pool(sentence[None], "cls", True)
        elif p.sentence:
            hidden = out["last_hidden_state"][i, :t]
            if e.holes and self.pooling != "cls":  # as the graph's pooling: real positions only
                hidden = np.delete(hidden, list(e.holes), axis=0)
            sentence = pool(hidden, self.pooling, p.normalize)
        att = attention_payload(weights, t, p.attention) if weights is not None else None
        hidden = p.hidden.payload(out["hidden_states"][i], t) if p.hidden is not None else None
        return Embedded(e.encoding, sentence, tokens, att, hidden)
