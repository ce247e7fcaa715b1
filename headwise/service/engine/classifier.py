"""A served classification package (cross-encoder or classifier): an EncoderRuntime whose
inputs are texts or (a, b) pairs and whose graphs answer `logits`.

Everything but the inputs and the outputs is the encoder's: the same batchers (one per
variant: `embed` runs fast or fast.fp16, `attention` the attention graph), limits, queue,
429/503, metrics, warm-up and fault injection. Pairs are tokenised as the package's tokenizer
encodes pairs (TextTokenizer.encode_items), so segment ids mark the second text.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable

from headwise.service.engine.batching import Entry, Job
from headwise.service.engine.classify import (
    Classified,
    ClassifyParams,
    ClassifyResult,
    activate,
    attention_bytes,
    response_bytes,
    returned_bytes,
)
from headwise.service.engine.encoder import EncoderRuntime
from headwise.service.engine.outputs import attention_payload, pair_attention
from headwise.service.engine.params import AttentionSpec
from headwise.service.engine.tokenizer import Encoded
from headwise.service.errors import Validation


class ClassifierRuntime(EncoderRuntime):
    @property
    def labels(self) -> list[str]:
        return list(self.package.labels)

    def check_embeddings(self) -> None:
        """Its graphs answer logits, not sentence embeddings: every embedding operation is refused
        here, before anything is queued (a batch of its batcher runs run_batch, which answers
        Classified for ClassifyParams only)."""
        raise Validation(f"model {self.name!r} is a classification model ({len(self.labels)} labels): use "
                         "POST /v1/rerank or /v1/predict; /v1/embed, /v1/similarity and /v1/occlusion serve "
                         "embedding models")

    async def embed(self, inputs, params, is_disconnected=None):
        self.check_embeddings()

    async def run_encoded(self, encs, params, holes=None, is_disconnected=None):
        self.check_embeddings()

    async def classify(self, inputs: list, params: ClassifyParams,
                       is_disconnected: Callable[[], Awaitable[bool]] | None = None,
                       field: str = "inputs") -> ClassifyResult:
        """Texts and (a, b) pairs, in their order; tokenised on the batcher's thread together
        with whatever else is waiting. `field`: the request field errors about input i name."""
        items = [x if isinstance(x, str) else tuple(x) for x in inputs]
        data: list[Classified] = await self._submit(items, params, is_disconnected, field)
        return ClassifyResult(self.name, self.package.version, self.labels, data)

    def returned_bytes(self, spec: AttentionSpec, enc: Encoded) -> int:
        return returned_bytes(spec, enc) if enc.segments is not None else spec.returned_bytes(enc.length)

    # -- the inference thread ------------------------------------------------------------
    def pretokenised(self, inputs) -> bool:
        return False

    def encode_inputs(self, inputs: list, truncate: bool) -> list[Encoded]:
        return self.tokenizer.encode_items(inputs, truncate)

    def attention_need(self, job: Job, encs: list[Encoded]) -> tuple[int, str]:
        spec = job.params.attention
        return (sum(attention_bytes(spec, e) if e.segments is not None else spec.nbytes(e.length) for e in encs),
                "asked-for attention")

    def answer_bytes(self, job: Job, encs: list[Encoded]) -> int:
        return sum(response_bytes(job.params, e, self.package.labels) for e in encs)

    def warm_params(self, role: str) -> ClassifyParams:
        return ClassifyParams()  # the attention variant still computes (and returns) its weights

    def run_batch(self, role: str, entries: list[Entry], padded: int, record: bool = True) -> list:
        f16, attention = self._attention_outputs(role, entries)
        out = self.run(role, entries, padded, ["logits", *attention], record)
        logits = out["logits"]
        results = []
        for i, e in enumerate(entries):
            p: ClassifyParams = e.job.params
            row = logits[i].astype("float32", copy=True)
            att = None
            if p.attention is not None:
                enc: Encoded = e.encoding
                att = (pair_attention(self._weights(out, f16, i), enc, p.attention) if enc.segments is not None
                       else attention_payload(self._weights(out, f16, i), e.length, p.attention))
            results.append(Classified(e.encoding, row, activate(row, p.raw_scores), att))
        return results
