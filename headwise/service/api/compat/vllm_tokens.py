"""vLLM's tokenizer routes' wire format (its TokenizeCompletionRequest, TokenizeResponse,
DetokenizeRequest and DetokenizeResponse, named Vllm… here): `/tokenize` takes vLLM's body
beside TEI's, told apart by `prompt` (routers/tei.py), and `/detokenize` is vLLM's alone
(routers/vllm.py). Pure: bodies and writers. vLLM's chat form of /tokenize (`messages`) is not
served: a body with it is refused.
"""

from __future__ import annotations

from typing import NamedTuple

from pydantic import BaseModel, ConfigDict, Field, StrictBool, StrictInt, StrictStr

from headwise.service.api.sizes import CHAR_BYTES, echoed_bytes
from headwise.service.api.writer import Writer
from headwise.service.engine.encoded import Encoded

KEY = "prompt"  # the key that makes a /tokenize body vLLM's


class VllmTokenizeRequest(BaseModel):
    model_config = ConfigDict(extra="forbid", json_schema_extra={"examples": [
        {"model": "all-minilm-l6-v2", "prompt": "Hello world", "return_token_strs": True}]})

    model: StrictStr | None = Field(None, description="model name; optional when one model is served")
    prompt: StrictStr = Field(..., description="the text; every token of it is answered (not cut at max_len)")
    add_special_tokens: StrictBool = Field(True, description="with the special tokens the tokenizer's "
                                                             "post-processor puts around the text ([CLS], [SEP])")
    return_token_strs: StrictBool = Field(False, description="also answer each token as the tokenizer names it")


class VllmTokenizeResponse(BaseModel):
    model_config = ConfigDict(json_schema_extra={"examples": [{
        "count": 4, "max_model_len": 256, "tokens": [101, 7592, 2088, 102],
        "token_strs": ["[CLS]", "hello", "world", "[SEP]"]}]})

    count: int
    max_model_len: int
    tokens: list[int]
    token_strs: list[str] | None = None


class VllmDetokenizeRequest(BaseModel):
    model_config = ConfigDict(extra="forbid", json_schema_extra={"examples": [{"tokens": [101, 7592, 2088, 102]}]})

    model: StrictStr | None = Field(None, description="model name; optional when one model is served")
    tokens: list[StrictInt] = Field(..., description="token ids, decoded with their special tokens as vLLM's "
                                                     "tokenizer.decode does; [] decodes to \"\"")


class VllmDetokenizeResponse(BaseModel):
    prompt: str


class Tokenized(NamedTuple):
    """/tokenize's vLLM request as its answer reads it."""

    max_len: int  # the model's, as max_model_len
    strs: bool  # return_token_strs


ENVELOPE_BYTES = 96  # the keys, count and max_model_len
ID_BYTES = 21  # an id as written, and its comma


def tokenize_bytes(e: Encoded, q: Tokenized) -> int:
    strs = sum(CHAR_BYTES * len(t) + 3 for t in e.tokens) if q.strs else 0
    return ENVELOPE_BYTES + ID_BYTES * e.length + strs


# an Encoded: the prompt's tokens
TOKENIZE = Writer(tokenize_bytes, lambda e, q: {
    "count": e.length, "max_model_len": q.max_len, "tokens": e.ids.tolist(),
    "token_strs": list(e.tokens) if q.strs else None}, "send a shorter prompt")
# the decoded text, alone in a list
DETOKENIZE = Writer(lambda texts, _: 32 + echoed_bytes(texts), lambda texts, _: {"prompt": texts[0]},
                    "send fewer tokens")
