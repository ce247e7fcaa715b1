"""Inference backends: onnxruntime sessions (CPU or CUDA) behind `run(role, feeds, outputs)`,
and the CUDA probe. No web framework and no HTTP here (import-linter)."""

from service.backends.generative import GenerativeBackend
from service.backends.onnxruntime import OrtBackend
from service.package import ModelPackage
from service.settings import Settings


def open_backend(package: ModelPackage, settings: Settings) -> OrtBackend:
    """The engine's default backend factory: sessions for an encoder's variants, or for every
    graph of a generative package."""
    return (GenerativeBackend if package.generative else OrtBackend)(package, settings)


__all__ = ["GenerativeBackend", "OrtBackend", "open_backend"]
