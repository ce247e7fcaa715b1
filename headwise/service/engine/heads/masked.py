"""The fill-mask head (masked language models: `*ForMaskedLM`), with what its requests ask for
(FillParams), each input's answer (Filled) and what an answer holds. An input is one text with
the package's mask token in it ("[MASK]"); the graphs answer `token_logits` [B, T, vocab_size],
every position's scores over the vocabulary (Devlin et al. 2019, "BERT", §3.1, "Masked LM").

The fills are chosen as transformers' fill-mask pipeline chooses them (its `postprocess`): at
each mask token, the softmax over the whole vocabulary, then limited to `targets` where given
(their probabilities are not renormalised), the best `top_k`; each with the text decoded with
that token in the mask's place (`sequence`: special tokens left out when the input has one
mask, kept when it has several, so that the other masks show) and the token decoded alone
(`token_str`). A text without the mask token, or whose masks truncation cut off, is refused (the
pipeline raises)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

import numpy as np

from headwise.service.engine.internals import Ablation
from headwise.service.engine.outputs import attention_payload
from headwise.service.engine.params import AttentionSpec, Read
from headwise.service.engine.runtime import Batched, Capability
from headwise.service.engine.size import Size, total
from headwise.service.engine.tokenizer import Cut, Encoded, TextTokenizer
from headwise.service.engine.work import Entry, Inputs
from headwise.service.errors import FIELD, Validation
from headwise.service.package import ModelPackage, PackageError

MAX_TOP_K = 1000  # fills per mask a request may ask for; the answer's size is bounded beside it
FILL: Capability[Batched] = Capability(
    "fill", "a masked language model (`*ForMaskedLM`)", "{use}; /v1/fill_mask serves masked language models")


@dataclass(frozen=True)
class FillParams:
    truncate: bool = True  # cut a text at max_len (a mask past the cut is then refused)
    top_k: int = 5  # fills per mask, best first
    targets: tuple[int, ...] | None = None  # token ids the fills are chosen from (target_ids)
    attention: AttentionSpec | None = None  # over every position of the text
    ablate: Ablation | None = None  # heads removed (service.engine.internals)
    padded_attention: ClassVar[bool] = False
    token_strings: ClassVar[bool] = False  # encoded with its strings anyway (answer_size reads them)
    max_tokens: ClassVar[None] = None  # cut at max_len only
    special_tokens: ClassVar[bool] = True

    @property
    def analysis(self) -> bool:
        return self.ablate is not None

    @property
    def k(self) -> int:
        """Fills per mask: top_k, at most as many as the targets (the pipeline caps it so)."""
        return self.top_k if self.targets is None else min(self.top_k, len(self.targets))


@dataclass(frozen=True, slots=True)
class Fill:
    score: float  # the token's probability at the mask (over the whole vocabulary)
    token: int
    token_str: str  # the token decoded alone
    sequence: str  # the text decoded with the token in the mask's place


@dataclass(frozen=True, slots=True)
class Filled:
    """One input's answer: per mask token, in text order, its best fills."""

    encoding: Encoded
    masks: list[int]  # the mask tokens' positions
    fills: list[list[Fill]]
    attention: dict | None  # service.engine.outputs.attention_payload, over every position


def target_ids(tokenizer: TextTokenizer, targets: str | list[str]) -> tuple[int, ...]:
    """Targets (one, or a list) → token ids as the pipeline's `get_target_ids` reads them: a
    vocabulary entry as it is, else the first token the text encodes to; duplicates once.
    Validation when none is left."""
    tok = tokenizer.untruncated
    ids: list[int] = []
    for target in [targets] if isinstance(targets, str) else targets:
        found = tok.token_to_id(target)
        if found is None:
            pieces = tok.encode(target, add_special_tokens=False).ids
            if not pieces:
                continue  # the pipeline ignores a target that encodes to nothing
            found = pieces[0]
        if found not in ids:
            ids.append(found)
    if not ids:
        raise Validation("targets: none of them is a token or encodes to one", field="targets")
    return tuple(ids)


def softmax(x: np.ndarray) -> np.ndarray:
    e = np.exp(x - x.max(axis=-1, keepdims=True))  # (M, V)
    return e / e.sum(axis=-1, keepdims=True)


class MaskHead:
    use = "use POST /v1/fill_mask"
    cut: Cut = "longest_first"  # single texts only
    labelled = False  # its answers name tokens of the vocabulary

    def __init__(self, package: ModelPackage, tokenizer: TextTokenizer):
        mask = package.manifest.get("mask_token")
        mask_id = tokenizer.untruncated.token_to_id(mask) if isinstance(mask, str) else None
        if mask_id is None:
            raise PackageError(f"{package.path / 'manifest.json'}: a fill-mask package needs 'mask_token', "
                               "a token of its tokenizer")
        self.mask, self.mask_id, self.pad_id = mask, mask_id, package.pad_id
        vocab = package.manifest.get("vocab_size")  # the model's rows, which its logits score
        self.vocab_size = vocab if isinstance(vocab, int) and vocab > 0 else tokenizer.vocab_size
        self.tokenizer = tokenizer
        self.capabilities = frozenset({FILL})
        self.described = "a masked language model"
        # the most characters one token decodes to, at worst its own string's
        self.longest = max(len(t) for t in tokenizer.untruncated.get_vocab(with_added_tokens=True))

    def card(self) -> dict:
        return {"mask_token": self.mask}

    def pretokenised(self, inputs: Inputs) -> bool:
        return False

    def encode(self, tokenizer: TextTokenizer, inputs: Inputs, read: Read) -> list[Encoded]:
        return tokenizer.encode_unchecked(inputs, read.truncate)  # with strings: the answer's bound reads them

    def attention_need(self, params: FillParams, encs: list[Encoded]) -> tuple[int, str]:
        return sum(params.attention.nbytes(e.length) for e in encs), "asked-for attention"

    def answer_size(self, params: FillParams, encs: list[Encoded]) -> Size:
        """Per mask, `k` fills: a score, a token id, the token's string and the text decoded
        with it (at most every token's string and a space, and the longest token). An input
        without a mask token, or targets past the model's vocabulary, are refused here, where each
        request's inputs are checked alone."""
        past = [t for t in params.targets or () if t >= self.vocab_size]
        if past:  # a token the tokenizer added that the model has no row for
            raise Validation(f"targets: token id {past[0]} is past this model's vocabulary of {self.vocab_size}",
                             field="targets")
        sizes = []
        for i, e in enumerate(encs):
            n = int((e.ids == self.mask_id).sum()) * params.k
            if n == 0:
                raise Validation(f"{FIELD}[{i}] has no mask token {self.mask!r} among the tokens the model reads "
                                 "(none in the text, or truncation cut them off)", field="inputs")
            text = sum(len(t) + 1 for t in e.tokens) + self.longest
            spec = params.attention
            sizes.append(Size(values=n, indices=n, chars=n * (text + self.longest), records=n + n // params.k + 1,
                              blocks=(spec.block(e.length),) if spec is not None else ()))
        return total(sizes)

    def returned_bytes(self, spec: AttentionSpec, enc: Encoded) -> int:
        return spec.returned_bytes(enc.length)

    def warm_params(self, attention: AttentionSpec | None) -> FillParams:
        return FillParams(attention=attention)

    def outputs(self, entries: list[Entry]) -> list[str]:
        return ["token_logits"]

    def answer(self, out: dict, i: int, e: Entry, weights: np.ndarray | None) -> Filled:
        p: FillParams = e.job.params
        t = e.length
        ids = e.encoding.ids[:t]
        masks = np.flatnonzero(ids == self.mask_id)  # none in warm-up's texts
        probs = softmax(out["token_logits"][i, masks].astype(np.float32))  # [M, V]
        if p.targets is not None:
            probs = probs[:, list(p.targets)]  # [M, n_targets]
        best = np.argsort(-probs, axis=-1, kind="stable")[:, : p.k]  # [M, k]
        chosen = [[(float(probs[m, j]), int(p.targets[j]) if p.targets is not None else int(j)) for j in row]
                  for m, row in enumerate(best)]
        seqs = []
        for m, row in zip(masks, chosen, strict=True):
            for _, token in row:
                filled = ids.copy()
                filled[m] = token
                seqs.append(filled[filled != self.pad_id].tolist())
        flat = [token for row in chosen for _, token in row]
        # decoded as transformers decodes: an id past the tokenizer's vocabulary (a model may
        # have more rows than tokens) reads as nothing
        tok = self.tokenizer.untruncated
        texts = tok.decode_batch(seqs, skip_special_tokens=len(masks) == 1) if seqs else []
        strs = tok.decode_batch([[token] for token in flat], skip_special_tokens=False) if flat else []
        fills, at = [], 0
        for row in chosen:
            fills.append([Fill(score, token, strs[at + j], texts[at + j]) for j, (score, token) in enumerate(row)])
            at += len(row)
        att = attention_payload(weights, t, p.attention) if weights is not None else None
        return Filled(e.encoding, masks.tolist(), fills, att)
