"""The graphs of an encoder package (embedding, classification or token classification), as
torch modules ready for torch.onnx.export, and the export call every package's graphs go
through.

They use model/'s explicit attention path: matmul → softmax → matmul with an additive mask is
the pattern onnxruntime's transformer optimiser recognises and fuses into `Attention` (an
exported F.scaled_dot_product_attention hides it).
"""

from __future__ import annotations

import warnings
from pathlib import Path

import torch
from torch import Tensor, nn

from headwise.model.encoder_model import EncoderModel

OPSET = 17
INPUTS = ("input_ids", "attention_mask", "token_type_ids")
TYPES = INPUTS[2]  # only where the model reads segment ids (io_spec)
# attentions_f16 is the same weights cast to float16 in the graph (round to nearest even, as
# numpy's astype): the service sends those when a client asks for float16, without a copy of
# the float32 tensor off the GPU or a cast on the CPU.
ATTENTION_OUTPUTS = ("attentions", "attentions_f16")
# The analysis graph's own: a head mask in (1 keeps a head, 0 removes its output before W_O)
# and the residual stream after the embeddings and after each layer out.
HEAD_MASK, HIDDEN_STATES = "head_mask", "hidden_states"


class EncoderGraph(nn.Module):
    """(input_ids, attention_mask[, token_type_ids]) → the named outputs of the model
    [, attentions, attentions_f16]."""

    def __init__(self, model: EncoderModel, outputs: tuple[str, ...], with_attention: bool):
        super().__init__()
        self.model, self.outputs, self.with_attention = model, outputs, with_attention

    def forward(self, input_ids: Tensor, attention_mask: Tensor, *types: Tensor):
        """types: (token_type_ids,) where the model reads segment ids, else ()."""
        out = self.model(input_ids, attention_mask, *types, need_weights=self.with_attention, fused=False)
        result = tuple(getattr(out, name) for name in self.outputs)
        if self.with_attention:
            attentions = torch.stack(out.attentions, dim=1)  # (B, L, H, T, T)
            result += (attentions, attentions.to(torch.float16))
        return result


class AnalysisGraph(nn.Module):
    """(input_ids, attention_mask[, token_type_ids], head_mask) → the named outputs, attentions,
    attentions_f16, hidden_states: the attention graph with heads that can be removed
    (head_mask (B, L, H)) and every layer's output. onnxruntime runs the whole graph whatever a
    run fetches, so every analysis run also stacks the weights and the states: what that costs
    against the fast graph is in bench/results/analytics-internals.md."""

    def __init__(self, model: EncoderModel, outputs: tuple[str, ...]):
        super().__init__()
        self.model, self.outputs = model, outputs

    def forward(self, input_ids: Tensor, attention_mask: Tensor, *rest: Tensor):
        """rest: (token_type_ids, head_mask) where the model reads segment ids, else (head_mask,)."""
        *types, head_mask = rest
        out = self.model(input_ids, attention_mask, *types, need_weights=True, fused=False,
                         head_mask=head_mask, output_hidden_states=True)
        attentions = torch.stack(out.attentions, dim=1)  # (B, L, H, T, T)
        return (*(getattr(out, name) for name in self.outputs), attentions, attentions.to(torch.float16),
                torch.stack(out.hidden_states, dim=1))  # (B, L + 1, T, D)


def output_names(outputs: tuple[str, ...], with_attention: bool, analysis: bool = False) -> list[str]:
    return [*outputs, *(ATTENTION_OUTPUTS if with_attention or analysis else ()), *((HIDDEN_STATES,) if analysis else ())]


def _shapes(model: EncoderModel) -> dict[str, tuple[str, list]]:
    cfg = model.config
    # one logit per label, or per token of the vocabulary (a fill-mask head, which has no labels)
    n_labels = getattr(model.head, "vocab_size", None) or len(getattr(model.head, "labels", ()))
    attentions = ["batch", cfg.n_layers, cfg.n_heads, "seq", "seq"]
    d_embedding = getattr(model.head, "dim", None) or cfg.d_model  # Dense layers may change it
    return {"sentence_embedding": ("float32", ["batch", d_embedding]),
            "last_hidden_state": ("float32", ["batch", "seq", cfg.d_model]),
            "logits": ("float32", ["batch", n_labels]),
            "token_logits": ("float32", ["batch", "seq", n_labels]),
            "attentions": ("float32", attentions), "attentions_f16": ("float16", attentions),
            HIDDEN_STATES: ("float32", ["batch", cfg.n_layers + 1, "seq", cfg.d_model])}


def io_spec(model: EncoderModel, outputs: tuple[str, ...], with_attention: bool,
            analysis: bool = False) -> tuple[list[dict], list[dict]]:
    """Names, dtypes and symbolic shapes, as the manifest records them."""
    cfg, shapes = model.config, _shapes(model)
    # A family without segment ids (RoBERTa, ...) has a graph without the input.
    names = INPUTS if cfg.type_vocab_size and cfg.use_token_types else INPUTS[:2]
    inputs = [{"name": n, "dtype": "int64", "shape": ["batch", "seq"]} for n in names]
    if analysis:
        inputs.append({"name": HEAD_MASK, "dtype": "float32", "shape": ["batch", cfg.n_layers, cfg.n_heads]})
    return inputs, [{"name": n, "dtype": shapes[n][0], "shape": shapes[n][1]}
                    for n in output_names(outputs, with_attention, analysis)]


def dynamic_axes(specs: list[dict]) -> dict[str, dict[int, str]]:
    """{name: {axis: symbol}} for every symbolic axis of the given io_spec entries."""
    return {s["name"]: {i: d for i, d in enumerate(s["shape"]) if isinstance(d, str)} for s in specs}


def export_module(module: nn.Module, example: tuple[Tensor, ...], path: Path, inputs: list[dict],
                  outputs: list[dict]) -> None:
    """torch.onnx.export with the TorchScript exporter (it keeps the attention pattern
    onnxruntime's fuser matches) and every symbolic axis of the io spec dynamic."""
    with torch.no_grad(), warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch.onnx.export(
            module.eval(), example, str(path), input_names=[s["name"] for s in inputs],
            output_names=[s["name"] for s in outputs], dynamic_axes=dynamic_axes(inputs + outputs),
            opset_version=OPSET, dynamo=False, do_constant_folding=True,
        )


def to_onnx(model: EncoderModel, path: Path, outputs: tuple[str, ...], with_attention: bool,
            analysis: bool = False) -> None:
    """Export with dynamic batch and sequence axes; `analysis`: the AnalysisGraph."""
    b, t, cfg = 2, 7, model.config
    inputs, outs = io_spec(model, outputs, with_attention, analysis)
    example = (torch.ones(b, t, dtype=torch.long), torch.ones(b, t, dtype=torch.long),
               torch.zeros(b, t, dtype=torch.long))[: 3 if TYPES in {i["name"] for i in inputs} else 2]
    if analysis:
        example += (torch.ones(b, cfg.n_layers, cfg.n_heads),)
        module = AnalysisGraph(model, outputs)
    else:
        module = EncoderGraph(model, outputs, with_attention)
    export_module(module, example, path, inputs, outs)
