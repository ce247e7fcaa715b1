"""What the engine needs of a served model, whatever its kind: one small protocol and the
capabilities a model declares, so that the engine and the routers dispatch on what a model
can do (`Capability`), never on which kind it is."""

from __future__ import annotations

import enum
from collections.abc import Callable
from typing import Protocol

from headwise.service.engine.params import AttentionSpec
from headwise.service.engine.stats import ModelStats
from headwise.service.engine.tokenizer import TextTokenizer
from headwise.service.errors import Validation
from headwise.service.package import ModelPackage, variant_facts


class Capability(enum.Enum):
    """An operation family a model answers. Each value is the refusal's second half: `{use}`
    is what the model lacking it does serve (Runtime.use)."""

    EMBED = "{use}; /v1/embed, /v1/similarity and /v1/occlusion serve embedding models"
    CLASSIFY = "{use}; /v1/rerank and /v1/predict serve classification packages (cross-encoders, classifiers)"
    RERANK = "reranking needs a cross-encoder (one label, a relevance score); use /v1/predict"
    GENERATE = "{use}; /v1/generate serves decoder and encoder-decoder models"

    # Members are singletons: identity hashing, in C, for the membership test of every request
    # (Enum's own __hash__ is a Python call).
    __hash__ = object.__hash__


class Runtime(Protocol):
    package: ModelPackage
    tokenizer: TextTokenizer
    ready: bool
    capabilities: frozenset[Capability]
    described: str  # "an embedding model", "a decoder model": what refusals call it
    use: str  # what it serves, as refusals tell the client
    stats: ModelStats  # Triton's statistics of its requests and batches

    @property
    def name(self) -> str: ...

    @property
    def max_batch_tokens(self) -> int: ...

    def card(self) -> dict: ...  # the facts /v1/models shows (service.api.schemas.ModelCard)

    # start-up, on a worker thread: sessions (from the engine's backend factory), warm-up
    def load(self, factory: Callable) -> None: ...

    def warm_up(self) -> None: ...

    # on the event loop: queues and their tasks
    def start(self) -> None: ...

    def abort(self, exc: Exception) -> None: ...

    async def close(self, timeout: float) -> None: ...

    def attention_spec(self, layers, heads, **how) -> AttentionSpec: ...


def require(rt: Runtime, need: Capability) -> None:
    """Validation, saying what the model serves and which routes serve what was asked,
    unless `rt` declares `need`: the one refusal of an operation a model cannot do."""
    if need not in rt.capabilities:
        raise Validation(f"model {rt.name!r} is {rt.described}: " + need.value.format(use=rt.use))


def base_card(p: ModelPackage, backend, ready: bool, serving: Callable[[str], bool]) -> dict:
    """The facts every kind's card shows, from its package and its backend (None before load);
    `serving(variant)`: whether the backend runs that variant."""
    return {"id": p.name, "object": "model", "created": p.created, "owned_by": "headwise",
            "name": p.name, "version": p.version, "family": p.family, "architecture": p.architecture,
            "task": p.task, "n_layers": p.n_layers, "n_heads": p.n_heads, "d_model": p.d_model,
            "max_len": p.max_len, "provider": backend.provider if backend else None,
            "precision": backend.precision if backend else None, "ready": ready,
            "variants": {name: {"precision": v.precision, "outputs": list(v.outputs), "serving": serving(name),
                                **variant_facts(p.manifest, name)} for name, v in p.variants.items()}}
