"""What the engine needs of a served model, encoder or generative alike: one small protocol,
so that the engine holds models without knowing which kind each is (encoder, classifier,
generative)."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Protocol

from headwise.service.engine.budget import ResponseBudget
from headwise.service.engine.classify import ClassifyParams, ClassifyResult
from headwise.service.engine.params import AttentionSpec, Embedded, EmbedParams, EmbedResult
from headwise.service.engine.tokenizer import Encoded, TextTokenizer
from headwise.service.package import ModelPackage


class Runtime(Protocol):
    package: ModelPackage
    tokenizer: TextTokenizer
    ready: bool

    @property
    def name(self) -> str: ...

    def info(self) -> dict: ...

    # start-up, on a worker thread: sessions (from the engine's backend factory), warm-up
    def load(self, factory: Callable) -> None: ...

    def warm_up(self) -> None: ...

    # on the event loop: queues and their tasks
    def start(self) -> None: ...

    def abort(self, exc: Exception) -> None: ...

    async def close(self, timeout: float) -> None: ...

    # the operations; a model that cannot do one raises Validation saying which can
    def attention_spec(self, layers, heads, **how) -> AttentionSpec: ...

    def check_embeddings(self) -> None: ...  # before anything embedding-shaped is tokenised or queued

    async def embed(self, inputs: list, params: EmbedParams,
                    is_disconnected: Callable[[], Awaitable[bool]] | None = None) -> EmbedResult: ...

    async def run_encoded(self, encs: list[Encoded], params: EmbedParams, holes: list[int] | None = None,
                          is_disconnected: Callable[[], Awaitable[bool]] | None = None) -> list[Embedded]: ...

    async def generate(self, ask, budget: ResponseBudget): ...

    async def classify(self, inputs: list, params: ClassifyParams,
                       is_disconnected: Callable[[], Awaitable[bool]] | None = None,
                       field: str = "inputs") -> ClassifyResult: ...
