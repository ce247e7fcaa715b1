"""onnxruntime sessions for a generative package: every graph (prefill/decode, or
encoder/decoder_step) and its `.attention` form, with backend.py's provider logic."""

from __future__ import annotations

from headwise.service.backends.onnxruntime import OrtBackend


class GenerativeBackend(OrtBackend):
    """`run(variant, feeds, outputs)` on the variant named in the manifest ("prefill",
    "decode.attention", ...). One session per variant; fp32 only (docs/model-package.md)."""

    def _roles(self, precision: str) -> tuple[dict[str, str], str]:
        return {name: name for name in self.package.variants}, "fp32"

    def has(self, variant: str) -> bool:
        return variant in self._sessions
