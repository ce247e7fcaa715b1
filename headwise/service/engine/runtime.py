"""What the engine needs of a served model: the Runtime protocol every kind shares, and the
capabilities a model declares, each typed by the protocol that serves it (`Capability.EMBED`
→ Embedder, CLASSIFY and RERANK → Classifier, TAG → Tagger, GENERATE → Generator, ANALYSE →
Analyser). The
engine and the routers narrow a Runtime through a capability (`Engine.get(name, EMBED)`,
`Capability.of`), never by its class, and every refusal of a model's kind comes from one text
(`Capability.refusal`)."""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence
from concurrent.futures import Executor
from typing import TYPE_CHECKING, ClassVar, Generic, Protocol, TypeVar, cast

from headwise.service.engine.params import AttentionSpec, RequestParams
from headwise.service.engine.stats import ModelStats, Timing
from headwise.service.engine.tokenizer import Encoded, TextTokenizer
from headwise.service.errors import Validation
from headwise.service.metrics import ModelSeries
from headwise.service.package import ModelPackage, variant_facts

if TYPE_CHECKING:  # the generation package imports this module
    from headwise.service.engine.budget import ResponseBudget
    from headwise.service.engine.generation.runtime import Generation
    from headwise.service.engine.generation.sequence import GenerateInput
    from headwise.service.engine.internals import HiddenSpec


R = TypeVar("R", bound="Runtime", covariant=True)


class Runtime(Protocol):
    """What every served model is, whatever it can do: its package, tokenizer, lifecycle and
    card. What it can do is a Capability, and each capability's protocol below declares the
    operations the engine calls for it."""

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


Disconnected = Callable[[], Awaitable[bool]] | None


class Batched(Runtime, Protocol):
    """A model whose requests are batched jobs of inputs (an encoder, whatever its head)."""

    async def submit(self, inputs: Sequence, params: RequestParams, is_disconnected: Disconnected = None,
                     field: str = "inputs") -> tuple[list, int, Timing]: ...  # (answers, bound in bytes, timing)


class Embedder(Batched, Protocol):
    """Capability.EMBED: sentence and token embeddings (EncoderRuntime with an EmbeddingHead)."""

    head: ChecksParams


class Classifier(Batched, Protocol):
    """Capability.CLASSIFY (and RERANK with one label): logits and scores per text or pair
    (EncoderRuntime with a LogitsHead)."""


class Tagger(Batched, Protocol):
    """Capability.TAG: a label per token (EncoderRuntime with a TokenHead: NER, PII)."""


class Analyser(Runtime, Protocol):
    """Capability.ANALYSE: looking inside an encoder (its attention and hidden states served
    from the analysis graph, and the analytics rows of occlusion, similarity and head
    importance)."""

    series: ModelSeries  # its metrics (analytics counted per kind)

    def serves(self, role: str) -> bool: ...  # "attention" or "analysis", as HEADWISE_ANALYSIS allows

    async def run_encoded(self, encs: list[Encoded], params: RequestParams, holes: list[tuple[int, ...]] | None = None,
                          is_disconnected: Disconnected = None, ablations: list | None = None) -> list: ...


class Generator(Runtime, Protocol):
    """Capability.GENERATE: text from a decoder or an encoder-decoder (GenerativeRuntime)."""

    source_field: str  # the request field its text comes in: "prompt" or "source"

    def hidden_spec(self, layers, **how) -> HiddenSpec: ...

    async def generate(self, ask: GenerateInput, budget: ResponseBudget, pool: Executor | None = None) -> Generation: ...


class ChecksParams(Protocol):
    def check(self, params: RequestParams) -> None: ...  # Validation for what its graph cannot give


class Capability(Generic[R]):
    """An operation family a model answers, typed by the protocol that serves it: `of(rt)`
    narrows a Runtime to it, or refuses with the one text every protocol's refusal comes from
    (`refusal`). `native` is the refusal's second half on headwise's own routes; `{use}` is
    what the model lacking it does serve (Runtime.use)."""

    EMBED: ClassVar[Capability[Embedder]]
    CLASSIFY: ClassVar[Capability[Classifier]]
    RERANK: ClassVar[Capability[Classifier]]
    GENERATE: ClassVar[Capability[Generator]]
    TAG: ClassVar[Capability[Tagger]]
    ANALYSE: ClassVar[Capability[Analyser]]

    __slots__ = ("name", "native", "need")  # identity-hashed, in C: every request tests membership

    def __init__(self, name: str, need: str, native: str):
        self.name, self.need, self.native = name, need, native

    def __repr__(self) -> str:
        return f"Capability.{self.name.upper()}"

    def of(self, rt: Runtime, route: str | None = None, also: tuple[Capability, ...] = (),
           error: type[Validation] = Validation, **fields) -> R:
        """`rt` as this capability's protocol, or `error(refusal)` unless it declares it (or,
        with `also`, one of those)."""
        if self not in rt.capabilities and not any(c in rt.capabilities for c in also):
            raise error(self.refusal(rt, route, also), **fields)
        return cast(R, rt)

    def declared(self, rt: Runtime) -> R | None:
        """`rt` as this capability's protocol when it declares it, else None."""
        return cast(R, rt) if self in rt.capabilities else None

    def refusal(self, rt: Runtime, route: str | None = None, also: tuple[Capability, ...] = ()) -> str:
        """What the model is and what it lacks: on a protocol's `route`, what that route needs
        (this capability, or any of `also`); else headwise's own routes that serve it."""
        head = f"model {rt.name!r} is {rt.described}: "
        if route is None:
            return head + self.native.format(use=rt.use)
        return head + f"{route} needs " + " or ".join(c.need for c in (self, *also))


Capability.EMBED = Capability(
    "embed", "an embedding model", "{use}; /v1/embed, /v1/similarity and /v1/occlusion serve embedding models")
Capability.CLASSIFY = Capability(
    "classify", "a classification model (a classifier or a cross-encoder)",
    "{use}; /v1/rerank and /v1/predict serve classification packages (cross-encoders, classifiers)")
Capability.RERANK = Capability(
    "rerank", "a re-ranker (a cross-encoder: a classification model with one label)",
    "reranking needs a cross-encoder (one label, a relevance score); use /v1/predict")
Capability.GENERATE = Capability(
    "generate", "a generative model (a decoder or an encoder-decoder)",
    "{use}; /v1/generate serves decoder and encoder-decoder models")
Capability.TAG = Capability(
    "tag", "a token-classification model (a tagger: NER, PII)",
    "{use}; /v1/tag serves token-classification models (NER and PII taggers)")
Capability.ANALYSE = Capability(
    "analyse", "an encoder model (embedding, classification or tagging)",
    "{use}; looking inside serves encoder models (embedding, classification and tagging)")


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
