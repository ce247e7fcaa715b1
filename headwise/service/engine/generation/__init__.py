"""Text generation for decoder (GPT-2) and encoder-decoder (Marian) packages: sessions,
sampling, per-request sequences, the running batch and its scheduler (docs/generation.md)."""

from headwise.service.engine.generation.runtime import GenerativeRuntime

__all__ = ["GenerativeRuntime"]
