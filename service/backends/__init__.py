"""Inference backends: onnxruntime sessions (CPU or CUDA) behind `run(role, feeds, outputs)`,
and the CUDA probe. No web framework and no HTTP here (import-linter)."""
