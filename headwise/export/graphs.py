"""The two graphs of an encoder package, as torch modules ready for torch.onnx.export.

Both use model/'s explicit attention path: matmul → softmax → matmul with an additive mask is
the pattern onnxruntime's transformer optimiser recognises and fuses into `Attention`
(an exported F.scaled_dot_product_attention hides it).
"""

from __future__ import annotations

import warnings
from pathlib import Path

import torch
from torch import Tensor, nn

from headwise.model.sentence import SentenceEncoder

INPUTS = ("input_ids", "attention_mask", "token_type_ids")
FAST_OUTPUTS = ("sentence_embedding", "last_hidden_state")
# attentions_f16 is the same weights cast to float16 in the graph (round to nearest even, as
# numpy's astype): the service sends those when a client asks for float16, without a copy of
# the float32 tensor off the GPU or a cast on the CPU.
ATTENTION_OUTPUTS = (*FAST_OUTPUTS, "attentions", "attentions_f16")
OPSET = 17


class FastGraph(nn.Module):
    def __init__(self, model: SentenceEncoder):
        super().__init__()
        self.model = model

    def forward(self, input_ids: Tensor, attention_mask: Tensor, token_type_ids: Tensor):
        out = self.model(input_ids, attention_mask, token_type_ids, need_weights=False, fused=False)
        return out.sentence_embedding, out.last_hidden_state


class AttentionGraph(nn.Module):
    def __init__(self, model: SentenceEncoder):
        super().__init__()
        self.model = model

    def forward(self, input_ids: Tensor, attention_mask: Tensor, token_type_ids: Tensor):
        out = self.model(input_ids, attention_mask, token_type_ids, need_weights=True, fused=False)
        attentions = torch.stack(out.attentions, dim=1)  # (B, L, H, T, T)
        return out.sentence_embedding, out.last_hidden_state, attentions, attentions.to(torch.float16)


def io_spec(model: SentenceEncoder, with_attention: bool) -> tuple[list[dict], list[dict]]:
    """Names, dtypes and symbolic shapes, as the manifest records them."""
    cfg = model.config
    inputs = [{"name": n, "dtype": "int64", "shape": ["batch", "seq"]} for n in INPUTS]
    outputs = [
        {"name": "sentence_embedding", "dtype": "float32", "shape": ["batch", cfg.d_model]},
        {"name": "last_hidden_state", "dtype": "float32", "shape": ["batch", "seq", cfg.d_model]},
    ]
    if with_attention:
        for name, dtype in (("attentions", "float32"), ("attentions_f16", "float16")):
            outputs.append({"name": name, "dtype": dtype, "shape": ["batch", cfg.n_layers, cfg.n_heads, "seq", "seq"]})
    return inputs, outputs


def to_onnx(model: SentenceEncoder, path: Path, with_attention: bool) -> None:
    """Export with dynamic batch and sequence axes (TorchScript exporter: it keeps the
    attention pattern onnxruntime's fuser matches)."""
    graph = (AttentionGraph if with_attention else FastGraph)(model).eval()
    names = ATTENTION_OUTPUTS if with_attention else FAST_OUTPUTS
    b, t = 2, 7
    example = (
        torch.ones(b, t, dtype=torch.long),
        torch.ones(b, t, dtype=torch.long),
        torch.zeros(b, t, dtype=torch.long),
    )
    axes = {n: {0: "batch", 1: "seq"} for n in INPUTS}
    axes["sentence_embedding"] = {0: "batch"}
    axes["last_hidden_state"] = {0: "batch", 1: "seq"}
    if with_attention:
        axes["attentions"] = axes["attentions_f16"] = {0: "batch", 3: "seq", 4: "seq"}
    with torch.no_grad(), warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch.onnx.export(
            graph,
            example,
            str(path),
            input_names=list(INPUTS),
            output_names=list(names),
            dynamic_axes=axes,
            opset_version=OPSET,
            dynamo=False,
            do_constant_folding=True,
        )
