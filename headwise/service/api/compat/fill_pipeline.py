"""The answer of transformers' fill-mask pipeline, as Hugging Face Inference Endpoints serve it
and huggingface_hub's `InferenceClient.fill_mask` reads it: `{"inputs": "...", "parameters":
{"top_k", "targets"}}` → `[{score, token, token_str, sequence}, ...]` for a text with one mask,
a list of such lists for one with several. The fills are the fill-mask head's (service.engine.
heads.masked: the pipeline's own choice). Pure shaping: the TEI router's POST / calls
Engine.submit and answers with FILLS."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field, StrictBool, StrictStr, conint, conlist

from headwise.service.api.compat.tei import TeiBody
from headwise.service.api.writer import Writer
from headwise.service.engine.heads.masked import MAX_TOP_K, FillParams, target_ids
from headwise.service.engine.tokenizer import TextTokenizer


class FillMaskParameters(BaseModel):
    model_config = ConfigDict(extra="forbid")

    top_k: conint(strict=True, ge=1, le=MAX_TOP_K) | None = None
    targets: StrictStr | conlist(StrictStr, min_length=1, max_length=MAX_TOP_K) | None = None


class FillMaskRequest(TeiBody):
    model_config = ConfigDict(extra="forbid", json_schema_extra={"examples": [
        {"inputs": "Paris is the [MASK] of France.", "parameters": {"top_k": 3}}]})

    inputs: StrictStr = Field(..., description="one text with the model's mask token")
    parameters: FillMaskParameters | None = None
    truncate: StrictBool | None = Field(None, description="cut the text at max_len tokens (TEI's auto_truncate: "
                                        "true when null)")


def params(body: FillMaskRequest, tokenizer: TextTokenizer) -> FillParams:
    p = body.parameters or FillMaskParameters()
    targets = None if p.targets is None else target_ids(tokenizer, p.targets)
    return FillParams(truncate=body.truncate is not False, top_k=p.top_k or 5, targets=targets)


def fills_of(fills: list) -> list[dict]:
    """One mask's fills as the pipeline writes them (also /v1/fill_mask's)."""
    return [{"score": f.score, "token": f.token, "token_str": f.token_str, "sequence": f.sequence} for f in fills]


def _fills(result, _) -> list:
    masks = [fills_of(fills) for fills in result.data[0].fills]
    return masks[0] if len(masks) == 1 else masks  # the pipeline's shape


# a HeadResult of one text; the engine's figure bounds the fills, 16 bytes the list's brackets
FILLS = Writer(lambda r, _: r.answer_bytes + 16, _fills, "ask for a smaller top_k")
