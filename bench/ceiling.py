"""The ceiling: raw in-process onnxruntime on the package's own graphs, no HTTP, no batching
logic, no tokenising, every input the same length (no padding). Sentences per second and
per-call latency, intra-op threads = usable cores.

On CUDA it binds inputs from host memory and outputs on the device, then copies the outputs
back, as the service does (IOBinding), so the ratio compares like with like.
"""

from __future__ import annotations

from bench.cells import Row, Sample, time_calls
from bench.facts import usable_cores
from bench.workload import Workload
from headwise.service.backends.onnxruntime import CPU_DISABLED_OPTIMIZERS

CPU, CUDA = "CPUExecutionProvider", "CUDAExecutionProvider"


def outputs_for(variant: str) -> list[str]:
    """What the service fetches for a pooled request (plus attentions when asked)."""
    return ["sentence_embedding", "attentions"] if variant == "attention" else ["sentence_embedding"]


class Ceiling:
    def __init__(self, workload: Workload, provider: str = "cpu", threads: int | None = None,
                 spin: bool = True):
        import onnxruntime as ort

        self.ort = ort
        self.w = workload
        self.provider = provider
        self.threads = threads or usable_cores()
        self.spin = spin
        self._sessions: dict = {}
        if provider == "cuda":  # the CUDA libraries, found as the service finds them
            from headwise.service.backends import cuda

            found = cuda.probe(0)
            if not found.ok:
                raise RuntimeError(f"bench: CUDA cannot be used here: {found.why()}")

    def session(self, variant: str):
        if variant not in self._sessions:
            so = self.ort.SessionOptions()
            so.intra_op_num_threads = self.threads
            so.inter_op_num_threads = 1
            so.execution_mode = self.ort.ExecutionMode.ORT_SEQUENTIAL
            so.log_severity_level = 3
            if not self.spin or self.provider == "cuda":
                so.add_session_config_entry("session.intra_op.allow_spinning", "0")
            if self.provider == "cuda":  # as the service's CUDA sessions (headwise/service/backends/onnxruntime.py)
                so.intra_op_num_threads = 1
            providers = ([(CUDA, {"use_tf32": "0" if variant in ("fp32", "attention") else "1"}), CPU]
                         if self.provider == "cuda" else [CPU])
            # the session the service makes: on CPU, no SkipLayerNorm fusion at load time
            sess = self.ort.InferenceSession(str(self.w.variant_file(variant)), sess_options=so, providers=providers,
                                             disabled_optimizers=CPU_DISABLED_OPTIMIZERS if self.provider == "cpu" else None)
            if self.provider == "cuda" and CUDA not in sess.get_providers():
                raise RuntimeError(f"{variant}: CUDAExecutionProvider did not load "
                                   f"(got {sess.get_providers()})")
            self._sessions[variant] = sess
        return self._sessions[variant]

    def runner(self, variant: str, tokens: int, batch: int):
        """A no-argument callable doing one forward pass of `batch` inputs, outputs on host."""
        sess = self.session(variant)
        names = [i.name for i in sess.get_inputs()]
        feeds = self.w.feeds(tokens, batch, names)
        outputs = outputs_for(variant)
        if "attentions_f16" in {o.name for o in sess.get_outputs()}:  # what the service reads for
            outputs = ["sentence_embedding", "attentions_f16"]     # the benchmark's float16 requests
        if self.provider != "cuda":
            return lambda: sess.run(outputs, feeds)

        def run_bound():
            binding = sess.io_binding()
            for name, arr in feeds.items():
                binding.bind_cpu_input(name, arr)
            for name in outputs:
                binding.bind_output(name, "cuda")
            sess.run_with_iobinding(binding)
            return binding.copy_outputs_to_cpu()

        return run_bound

    def measure(self, variant: str, tokens: int, batch: int, seconds: float = 1.0,
                min_calls: int = 3, warmup: int = 1) -> Sample:
        return time_calls(self.runner(variant, tokens, batch), batch, seconds, min_calls, warmup)

    def row(self, variant: str, tokens: int, batch: int) -> Row:
        return Row("ceiling", variant, tokens, self.w.effective(tokens), batch=batch)


def main() -> None:  # pragma: no cover - `python -m bench.ceiling DIR`: a quick look
    import sys

    from headwise.export import cpu as cpu_info

    w = Workload(sys.argv[1] if len(sys.argv) > 1 else "models")
    c = Ceiling(w)
    print(f"ceiling on {cpu_info.label()}")
    for variant in ("fp32", "int8", "attention"):
        for tokens in (16, 128):
            for batch in (1, 8, 32):
                s = c.measure(variant, tokens, batch)
                print(f"{variant:9} {tokens:4} tok  batch {batch:3}: {s.throughput:8.1f} /s  "
                      f"p50 {s.p50:7.2f} ms")


if __name__ == "__main__":  # pragma: no cover
    main()
