"""onnxruntime sessions for one model package: provider and variant choice, thread count, run.

The engine sees only `Backend`: `provider`, `variants` (role → variant name and precision)
and `run(role, feeds, outputs)`; tests swap in a fake with the same surface.
"""

from __future__ import annotations

import logging
import threading
import time
from functools import partial
from typing import Protocol

import numpy as np

from headwise.service.backends import cuda
from headwise.service.cpu import ANALYTICS_NICENESS, lowered_thread, usable_cores
from headwise.service.errors import NotReady
from headwise.service.package import ModelPackage, PackageError
from headwise.service.settings import Settings, worker_processes

log = logging.getLogger("headwise.service")

CUDA, CPU = "CUDAExecutionProvider", "CPUExecutionProvider"
HEAD_MASK = "head_mask"
LOOK_INSIDE = ("attention", "analysis")  # the roles on the analysis graph, which HEADWISE_ANALYSIS governs
# CPU graphs carry Add + LayerNormalization where the fuser made SkipLayerNormalization, whose
# CPU kernel is ~10× slower (headwise/export/optimize.py: unfuse_skip_layernorm); onnxruntime must not
# fuse them back when it loads the graph.
CPU_DISABLED_OPTIMIZERS = ["SkipLayerNormFusion"]


class Backend(Protocol):
    provider: str  # "cuda" | "cpu"
    # role ("embed" | "attention" | "analysis" | "analytics") → package variant name. "attention" and
    # "analysis": the analysis graph (one session). "analytics", on CPU only: the embed variant again,
    # in a session of its own (HEADWISE_ANALYTICS_THREADS)
    variants: dict[str, str]
    precision: str  # precision of the embed variant
    # (optional, False when absent) its sessions were warmed where they live: process mode's
    # RemoteBackend, whose engine process warmed them before any front-end started
    warmed: bool
    # (optional, none when absent) `lazy()`: the roles whose session is made on their first run
    # (HEADWISE_ANALYSIS=lazy), or by `load(role)` (NotReady when it cannot be); warm-up skips them

    def run(self, role: str, feeds: dict[str, np.ndarray], outputs: list[str]) -> dict[str, np.ndarray]: ...


PRECISION_VARIANTS = {"fp32": "fast", "int8": "fast.int8", "fp16": "fast.fp16"}


def verified(package: ModelPackage, variant: str) -> bool:
    """True when `headwise export`/`verify` recorded that the variant met its parity bar."""
    return bool(package.manifest.get("parity", {}).get(variant, {}).get("passed"))


def check_precision(packages: list[ModelPackage], precision: str, provider: str = "auto") -> None:
    """Refuse, before anything starts, a HEADWISE_PRECISION that an encoder package cannot serve
    (on HEADWISE_PROVIDER=cuda, int8 too)."""
    for package in packages:
        if not package.generative and precision != "auto":
            choose_variant(package, "cuda" if provider == "cuda" else "cpu", precision)


def inside_graph(variants, analysis: str) -> str | None:
    """The package variant that serves attention (and hidden states and removed heads when it
    is the analysis graph): None when HEADWISE_ANALYSIS=off or the package has neither. A
    package from before the analysis graph (2026-11-24) serves attention from its attention graph."""
    if analysis == "off":
        return None
    return next((v for v in ("analysis", "attention") if v in variants), None)


def metric_variant(variants: dict[str, str], role: str) -> str:
    """The `variant` label of `role`'s metrics: the package variant it runs, except the
    look-inside roles, named as themselves: they share the analysis graph, and each has a
    queue of its own."""
    return role if role in LOOK_INSIDE else variants[role]


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
    if provider == "cuda" and name == "fast.int8":
        raise PackageError("HEADWISE_PRECISION=int8 is for CPUs: its integer matrix products "
                           "(MatMulIntegerToFloat) have no CUDA kernel in onnxruntime. On a GPU serve "
                           "fp16 or fp32, or set HEADWISE_PROVIDER=cpu to serve int8 on the CPU")
    if name not in have:
        present = ", ".join(f"{v} ({have[v].precision})" for v in have)
        raise PackageError(f"{package.path}: HEADWISE_PRECISION={precision} but the package has no {name} "
                           f"variant; it has {present}")
    return name


class OrtBackend:
    """One onnxruntime session per role. On CUDA, inputs are bound from host memory and outputs
    on the device (IOBinding), then copied back; `binding` names the device to bind outputs on
    ("cuda"; "cpu" runs the same code on a machine without a GPU, for tests), None for plain
    `session.run`; "auto": "cuda" on CUDA, else None."""

    warmed = False

    def __init__(self, package: ModelPackage, settings: Settings, *, binding: str | None = "auto"):
        import onnxruntime as ort

        self._ort = ort
        self.package = package
        self.settings = settings
        workers = worker_processes(settings)
        self.provider = self._pick_provider(settings.provider)
        # A CUDA session's host threads only launch kernels: one, not spinning, leaves the cores
        # to the event loop and the tokenizer.
        self.threads = 1 if self.provider == "cuda" else settings.threads or max(1, usable_cores() // workers)
        self.binding = ("cuda" if self.provider == "cuda" else None) if binding == "auto" else binding
        self.variants, self.precision = self._roles(settings.precision)
        self._sessions: dict[str, object] = {}
        self._inputs: dict[str, list[str]] = {}
        self._loading = threading.Lock()
        self._broken: dict[str, str] = {}  # package variant → why its lazily made session failed
        for role in self.variants:
            if not (role in LOOK_INSIDE and settings.analysis == "lazy"):
                self._load(role)
        log.info("model %s: provider %s, %s threads, variants %s%s", package.name, self.provider,
                 self.threads, self.variants, "; the analysis graph loads when first asked for (HEADWISE_ANALYSIS="
                 "lazy)" if self.lazy() else "")

    def _roles(self, precision: str) -> tuple[dict[str, str], str]:
        """(role → package variant, the embed variant's precision): what may get a session.
        Attention, hidden states and removed heads all run on the analysis graph; a package
        from before it (2026-11-24) serves attention from its attention graph."""
        package = self.package
        roles = {"embed": choose_variant(package, self.provider, precision)}
        inside = inside_graph(package.variants, self.settings.analysis)
        if inside is not None:
            roles["attention"] = inside
            if inside == "analysis":
                roles["analysis"] = inside
        if self.provider == "cpu" and self.settings.analytics_threads and package.task == "embedding":
            roles["analytics"] = roles["embed"]
        return roles, package.variants[roles["embed"]].precision

    def lazy(self) -> list[str]:
        """The roles whose session is not made yet (HEADWISE_ANALYSIS=lazy, until first asked for)."""
        return [role for role in self.variants if role not in self._sessions]

    def _load(self, role: str) -> None:
        """`role`'s session; roles on the same graph (attention and analysis) share one."""
        name = self.variants[role]
        twin = next((r for r in self._sessions if self.variants[r] == name and "analytics" not in (r, role)), None)
        sess = self._sessions[twin] if twin is not None else self._session(self.package.variants[name], role)
        self._inputs[role] = [i.name for i in sess.get_inputs()]
        self._sessions[role] = sess

    def load(self, role: str) -> None:
        """Make `role`'s session now if it was left for its first run (NotReady if it cannot be)."""
        self._loaded(role)

    def _loaded(self, role: str):
        """`role`'s session, made now when it was left for its first request (one at a time).
        A graph that cannot be loaded then is refused (503, NotReady) from then on; plain work
        goes on."""
        sess = self._sessions.get(role)
        if sess is not None:
            return sess
        name = self.variants[role]
        with self._loading:
            if name in self._broken:
                raise NotReady(self._broken[name])
            if role not in self._sessions:
                t0 = time.perf_counter()
                try:
                    for r in self.lazy():  # every role on that graph (only look-inside roles are lazy)
                        if self.variants[r] == name:
                            self._load(r)
                except Exception as e:
                    file = self.package.variants[name].file.name
                    # the client hears which graph; the log, which alone says where and why (onnxruntime's
                    # message names the server's own path)
                    self._broken[name] = (f"model {self.package.name}: its {name} graph ({file}) could not be "
                                          "loaded; see the server log")
                    log.error("model %s: its %s graph (%s) could not be loaded: %s: %s", self.package.name, name,
                              self.package.variants[name].file, type(e).__name__, e)
                    raise NotReady(self._broken[name]) from None
                log.info("model %s: %s graph loaded for its first request in %.1fs (HEADWISE_ANALYSIS=lazy)",
                         self.package.name, name, time.perf_counter() - t0)
        return self._sessions[role]

    def _options(self, provider: str, threads: int | None = None):
        so = self._ort.SessionOptions()
        so.intra_op_num_threads = (threads or self.threads) if provider == "cpu" else 1
        so.inter_op_num_threads = 1
        so.execution_mode = self._ort.ExecutionMode.ORT_SEQUENTIAL
        so.log_severity_level = 3
        # onnxruntime caches a memory plan per input shape; the CPU batcher pads to each batch's
        # own length (thousands of shapes), so there it plans as it goes instead.
        so.enable_mem_pattern = provider == "cuda"
        if provider == "cpu":
            # Spin while a run lasts (each op's threads start at once), not after it: a pool
            # still spinning would take a core from the event loop answering that batch and
            # reading the next (bench/results/experiments-cpu.md).
            so.add_session_config_entry("session.force_spinning_stop", "1")
        else:
            so.add_session_config_entry("session.intra_op.allow_spinning", "0")
        return so

    def cuda_options(self, precision: str) -> dict[str, str]:
        """The CUDA provider's options for a graph of this precision. TF32 rounds fp32 matrix
        products to 10 mantissa bits: off wherever fp32 parity (1e-5) is promised."""
        s = self.settings
        opts = {"use_tf32": "0" if precision == "fp32" else "1", "arena_extend_strategy": "kSameAsRequested"}
        if s.device_id:  # onnxruntime ≥ 1.26 warns, harmlessly, for every session given a device_id
            opts["device_id"] = str(s.device_id)
        if s.gpu_mem_limit:
            opts["gpu_mem_limit"] = str(s.gpu_mem_limit)
        return opts

    def _session(self, variant, role: str):
        provider = self.provider
        providers = [(CUDA, self.cuda_options(variant.precision)), CPU] if provider == "cuda" else [CPU]
        threads = self.settings.analytics_threads if role == "analytics" else self.threads
        make = partial(self._ort.InferenceSession, str(variant.file), sess_options=self._options(provider, threads),
                       providers=providers,
                       disabled_optimizers=CPU_DISABLED_OPTIMIZERS if provider == "cpu" else None)
        if role == "analytics":  # its pool threads inherit the lowest priority from the thread made here
            with lowered_thread(niceness=ANALYTICS_NICENESS) as pool:
                sess = pool.submit(make).result()
        else:
            sess = make()
        if provider == "cuda" and CUDA not in sess.get_providers():
            raise PackageError(f"{variant.file}: onnxruntime made a CPU session where CUDA was asked for "
                               f"(providers {sess.get_providers()})")
        return sess

    def _pick_provider(self, wanted: str) -> str:
        """`cuda` that cannot be had raises, naming what is missing; `auto` without CUDA warns
        once, saying why, and serves on CPU."""
        if wanted == "cpu":
            return "cpu"
        found = cuda.probe(self.settings.device_id)
        if not found.ok:
            if wanted == "cuda":
                raise PackageError(f"HEADWISE_PROVIDER=cuda, but CUDA cannot be used here: {found.why()}")
            cuda.warn_cpu_once(found)
            return "cpu"
        return "cuda"

    def input_names(self, role: str) -> list[str]:
        self._loaded(role)
        return self._inputs[role]

    def session(self, role: str):
        """`role`'s onnxruntime InferenceSession (bench: its providers, IOBinding beside run)."""
        return self._loaded(role)

    def _default(self, name: str, feeds: dict[str, np.ndarray]) -> np.ndarray:
        """An input the caller left out: the analysis graph's head mask keeps every head (the
        attention role runs on that graph; its callers know nothing of removing heads)."""
        if name != HEAD_MASK:
            raise KeyError(name)
        p = self.package
        return np.ones((len(feeds["input_ids"]), p.n_layers, p.n_heads), dtype=np.float32)

    def run(self, role: str, feeds: dict[str, np.ndarray], outputs: list[str]) -> dict[str, np.ndarray]:
        sess = self._loaded(role)
        feeds = {k: feeds[k] if k in feeds else self._default(k, feeds) for k in self._inputs[role]}
        if self.binding is None:
            return dict(zip(outputs, sess.run(outputs, feeds), strict=True))
        return run_bound(sess, feeds, outputs, self.binding, self.settings.device_id)


def run_bound(sess, feeds: dict[str, np.ndarray], outputs: list[str], device: str,
              device_id: int = 0) -> dict[str, np.ndarray]:
    """One run with IOBinding: inputs from host memory, outputs left where the graph made them
    on `device` (their shapes are dynamic), then copied to host."""
    binding = sess.io_binding()
    for name, arr in feeds.items():
        binding.bind_cpu_input(name, arr)
    for name in outputs:
        binding.bind_output(name, device, device_id if device == "cuda" else 0)
    sess.run_with_iobinding(binding)
    return dict(zip(outputs, binding.copy_outputs_to_cpu(), strict=True))
