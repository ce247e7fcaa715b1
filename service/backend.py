"""onnxruntime sessions for one model package: provider and variant choice, thread count, run.

The engine sees only `Backend`: `provider`, `variants` (role → variant name and precision)
and `run(role, feeds, outputs)`; tests swap in a fake with the same surface.
"""

from __future__ import annotations

import logging
from typing import Protocol

import numpy as np

from service.package import ModelPackage, PackageError
from service.resources import usable_cores
from service.settings import Settings

log = logging.getLogger("headwise.service")

CUDA, CPU = "CUDAExecutionProvider", "CPUExecutionProvider"
# CPU graphs carry Add + LayerNormalization where the fuser made SkipLayerNormalization, whose
# CPU kernel is ~10× slower (export/optimize.py: unfuse_skip_layernorm); onnxruntime must not
# fuse them back when it loads the graph.
CPU_DISABLED_OPTIMIZERS = ["SkipLayerNormFusion"]


class Backend(Protocol):
    provider: str  # "cuda" | "cpu"
    variants: dict[str, str]  # role ("embed" | "attention") → package variant name
    precision: str  # precision of the embed variant

    def run(self, role: str, feeds: dict[str, np.ndarray], outputs: list[str]) -> dict[str, np.ndarray]: ...


PRECISION_VARIANTS = {"fp32": "fast", "int8": "fast.int8", "fp16": "fast.fp16"}


def verified(package: ModelPackage, variant: str) -> bool:
    """True when `headwise export`/`verify` recorded that the variant met its parity bar."""
    return bool(package.manifest.get("parity", {}).get(variant, {}).get("passed"))


def check_precision(packages: list[ModelPackage], precision: str) -> None:
    """Refuse, before anything starts, a HEADWISE_PRECISION that an encoder package cannot serve."""
    for package in packages:
        if not package.generative and precision != "auto":
            choose_variant(package, "cpu", precision)


def choose_variant(package: ModelPackage, provider: str, precision: str) -> str:
    """The embed variant for HEADWISE_PRECISION. `auto` is the model's own precision (fp32),
    except fp16 on CUDA where the package's fp16 variant passed its parity bar. int8 and fp16
    are served only when present: asking for a missing one fails, naming those there are."""
    have = package.variants
    if precision == "auto":
        if provider == "cuda" and "fast.fp16" in have:
            if verified(package, "fast.fp16"):
                return "fast.fp16"
            log.warning("model %s: fast.fp16 has not passed its parity bar (run `headwise verify`); "
                        "serving fp32 on CUDA", package.name)
        return "fast"
    name = PRECISION_VARIANTS[precision]
    if name not in have:
        present = ", ".join(f"{v} ({have[v].precision})" for v in have)
        raise PackageError(f"{package.path}: HEADWISE_PRECISION={precision} but the package has no {name} "
                           f"variant; it has {present}")
    return name


class OrtBackend:
    def __init__(self, package: ModelPackage, settings: Settings):
        import onnxruntime as ort

        self._ort = ort
        self.package = package
        workers = max(1, settings.workers)
        self.threads = settings.threads or max(1, usable_cores() // workers)
        self.provider = self._pick_provider(settings.provider)
        self.variants, self.precision = self._roles(settings.precision)
        self._sessions = {role: self._session(package.variants[name].file, self.provider)
                          for role, name in self.variants.items()}
        self._inputs = {r: [i.name for i in s.get_inputs()] for r, s in self._sessions.items()}
        log.info("model %s: provider %s, %s threads, variants %s", package.name, self.provider,
                 self.threads, self.variants)

    def _roles(self, precision: str) -> tuple[dict[str, str], str]:
        """(role → package variant, the embed variant's precision): what gets a session."""
        package = self.package
        roles = {"embed": choose_variant(package, self.provider, precision)}
        if "attention" in package.variants:
            roles["attention"] = "attention"
        return roles, package.variants[roles["embed"]].precision

    def _options(self, provider: str):
        so = self._ort.SessionOptions()
        so.intra_op_num_threads = self.threads
        so.inter_op_num_threads = 1
        so.execution_mode = self._ort.ExecutionMode.ORT_SEQUENTIAL
        so.log_severity_level = 3
        # onnxruntime caches a memory plan per input shape; the CPU batcher pads to each batch's
        # own length (thousands of shapes), so there it plans as it goes instead.
        so.enable_mem_pattern = provider == "cuda"
        if provider == "cpu":
            # Spin while a run lasts (each op's threads start at once), not after it: a pool
            # still spinning would take a core from the event loop answering that batch and
            # reading the next (16 clients: +5% inputs/s; 1 client: +0.2 ms; experiments-cpu.md).
            so.add_session_config_entry("session.force_spinning_stop", "1")
        return so

    def _session(self, file, provider: str):
        providers = [CUDA, CPU] if provider == "cuda" else [CPU]
        sess = self._ort.InferenceSession(str(file), sess_options=self._options(provider), providers=providers,
                                          disabled_optimizers=CPU_DISABLED_OPTIMIZERS if provider == "cpu" else None)
        if provider == "cuda" and CUDA not in sess.get_providers():
            raise RuntimeError(f"{file}: CUDAExecutionProvider did not load")
        return sess

    def _pick_provider(self, wanted: str) -> str:
        if wanted == "cpu":
            return "cpu"
        ok = CUDA in self._ort.get_available_providers() and self._cuda_works()
        if wanted == "cuda" and not ok:
            raise PackageError("HEADWISE_PROVIDER=cuda but onnxruntime cannot create a CUDA session here")
        return "cuda" if ok else "cpu"

    def _cuda_works(self) -> bool:
        # The GPU wheel lists CUDA as available on machines without a GPU; only a session that
        # really got the provider counts. The smallest variant is enough to find out.
        variant = min(self.package.variants.values(), key=lambda v: v.file.stat().st_size)
        self._ort.set_default_logger_severity(4)  # its "cannot load libcublas" is expected here
        try:
            sess = self._ort.InferenceSession(str(variant.file), sess_options=self._options("cuda"),
                                              providers=[CUDA, CPU])
        except Exception as e:  # any failure means "no CUDA here"
            log.info("CUDA session failed (%s); using CPU", type(e).__name__)
            return False
        finally:
            self._ort.set_default_logger_severity(2)
        return CUDA in sess.get_providers()

    def input_names(self, role: str) -> list[str]:
        return self._inputs[role]

    def run(self, role: str, feeds: dict[str, np.ndarray], outputs: list[str]) -> dict[str, np.ndarray]:
        sess = self._sessions[role]
        feeds = {k: feeds[k] for k in self._inputs[role]}
        if self.provider == "cuda":
            binding = sess.io_binding()
            for name, arr in feeds.items():
                binding.bind_cpu_input(name, arr)
            for name in outputs:
                binding.bind_output(name, "cuda")
            sess.run_with_iobinding(binding)
            return dict(zip(outputs, binding.copy_outputs_to_cpu(), strict=True))
        return dict(zip(outputs, sess.run(outputs, feeds), strict=True))
