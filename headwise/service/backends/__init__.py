"""Inference backends: onnxruntime sessions (CPU or CUDA) behind `run(role, feeds, outputs)`,
and the CUDA probe. No web framework and no HTTP here (import-linter)."""

from headwise.service.backends.generative import GenerativeBackend
from headwise.service.backends.onnxruntime import OrtBackend
from headwise.service.package import ModelPackage
from headwise.service.settings import Settings


def open_backend(package: ModelPackage, settings: Settings) -> OrtBackend:
    """The engine's default backend factory: sessions for an encoder's variants, or for every
    graph of a generative package."""
    return (GenerativeBackend if package.generative else OrtBackend)(package, settings)


__all__ = ["GenerativeBackend", "OrtBackend", "open_backend"]
