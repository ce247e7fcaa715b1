"""onnxruntime sessions for a generative package: every graph (prefill/decode, or
encoder/decoder_step) and its `.attention` form, with backend.py's provider logic."""

from __future__ import annotations

import logging

from service.backend import OrtBackend
from service.package import ModelPackage
from service.resources import usable_cores
from service.settings import Settings

log = logging.getLogger("headwise.service")


class GenerativeBackend(OrtBackend):
    """`run(variant, feeds, outputs)` on the variant named in the manifest ("prefill",
    "decode.attention", ...). One session per variant; fp32 only (docs/model-package.md)."""

    def __init__(self, package: ModelPackage, settings: Settings):
        import onnxruntime as ort

        self._ort = ort
        self.package = package
        workers = max(1, settings.workers)
        self.threads = settings.threads or max(1, usable_cores() // workers)
        self.provider = self._pick_provider(settings.provider)
        self.variants = {name: name for name in package.variants}
        self.precision = "fp32"
        self._sessions = {name: self._session(v.file, self.provider) for name, v in package.variants.items()}
        self._inputs = {r: [i.name for i in s.get_inputs()] for r, s in self._sessions.items()}
        log.info("model %s: provider %s, %s threads, graphs %s", package.name, self.provider,
                 self.threads, ", ".join(self.variants))

    def has(self, variant: str) -> bool:
        return variant in self._sessions
