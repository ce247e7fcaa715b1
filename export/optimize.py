"""onnxruntime's transformer optimiser (fusion), dynamic int8 and fp16 conversion."""

from __future__ import annotations

import logging
from pathlib import Path

FUSED_OPS = ("Attention", "MultiHeadAttention", "SkipLayerNormalization", "EmbedLayerNormalization",
             "BiasGelu", "Gelu", "FastGelu", "LayerNormalization")


def _quiet() -> None:
    for name in ("onnxruntime.transformers", "fusion", "onnx_model", "onnx_model_bert", "root"):
        logging.getLogger(name).setLevel(logging.ERROR)


def optimize(src: Path, dst: Path, n_heads: int, d_model: int, fp16_dst: Path | None = None) -> dict[str, int]:
    """Fuse attention, SkipLayerNorm, EmbedLayerNorm and Gelu; write dst (fp32) and, when
    asked, an fp16 copy. Returns the non-zero fused-operator counts."""
    from onnxruntime.transformers import optimizer

    _quiet()
    opt = optimizer.optimize_model(
        str(src), model_type="bert", num_heads=n_heads, hidden_size=d_model
    )
    stats = {k: v for k, v in opt.get_fused_operator_statistics().items() if v}
    opt.save_model_to_file(str(dst))
    if fp16_dst is not None:
        # keep_io_types: callers feed and read float32; LayerNorm/Softmax run inside fused
        # kernels that accumulate in fp32.
        opt.convert_float_to_float16(keep_io_types=True)
        opt.save_model_to_file(str(fp16_dst))
    return stats


def quantize_int8(src: Path, dst: Path) -> None:
    """Dynamic int8: weights quantised once (per output channel: per-tensor scales cost
    all-MiniLM-L6-v2 ~3 points of cosine), activations per batch at run time (CPU)."""
    from onnxruntime.quantization import QuantType, quantize_dynamic

    _quiet()
    import onnx

    quantize_dynamic(
        str(src), str(dst), weight_type=QuantType.QInt8, per_channel=True,
        # Fused contrib ops (Attention, SkipLayerNorm) defeat ONNX shape inference.
        extra_options={"DefaultTensorType": onnx.TensorProto.FLOAT},
    )
