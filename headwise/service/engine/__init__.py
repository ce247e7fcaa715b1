"""The engine: loaded models, tokenisation, batching and post-processing, behind whole
operations (embed, tokenize, similarity, occlusion, classify, rerank, generate). No web
framework and no HTTP here (import-linter):
it raises service.errors' domain errors, which each protocol of service.api maps."""

from headwise.service.engine.encoder import BackendFactory, EncoderRuntime
from headwise.service.engine.engine import Engine
from headwise.service.engine.runtime import Capability, Runtime

__all__ = ["BackendFactory", "Capability", "EncoderRuntime", "Engine", "Runtime"]
