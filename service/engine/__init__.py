"""The engine: loaded models, tokenisation, batching and post-processing, behind whole
operations (embed, tokenize, classify, rerank, generate). No web framework and no HTTP here (import-linter):
it raises service.errors' domain errors, which each protocol of service.api maps."""

from service.engine.classifier import ClassifierRuntime
from service.engine.encoder import BackendFactory, EncoderRuntime
from service.engine.engine import Engine

__all__ = ["BackendFactory", "ClassifierRuntime", "EncoderRuntime", "Engine"]
