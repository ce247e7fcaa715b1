"""A Python client of the headwise HTTP API (docs/client.md), on httpx and numpy only.

    from headwise.client import Client

    with Client("http://127.0.0.1:8000") as hw:
        res = hw.embed(["the cat sat"], attention={"layers": [0], "dtype": "float16", "encoding": "base64"})
        res.embeddings                 # [N, d_model] float32
        res.data[0].attention.values   # [1, n_heads, T, T] float16

It imports nothing of the server (headwise.service), so it installs and runs without
onnxruntime, FastAPI or torch being used."""

from headwise.client.arrays import decode_array
from headwise.client.client import AsyncClient, Client
from headwise.client.errors import HeadwiseError
from headwise.client.heads import (
    Answer,
    AnswerItem,
    AnswerResult,
    Entity,
    Fill,
    FillItem,
    FillMaskResult,
    Mask,
    SparseItem,
    SparseResult,
    TaggedText,
    TaggedToken,
    TagResult,
)
from headwise.client.types import (
    Attention,
    AttentionBlock,
    AttentionOptions,
    EmbedItem,
    EmbedResult,
    GenerateAttention,
    GenerateHidden,
    GenerateResult,
    GenerateStep,
    GenerateToken,
    HeadImportanceResult,
    HiddenState,
    HiddenStatesOptions,
    Label,
    ModelInfo,
    OcclusionResult,
    OcclusionUnit,
    PredictResult,
    RerankAttention,
    RerankItem,
    RerankResult,
    SimilarityItem,
    SimilarityResult,
    TokenizeItem,
    TokenizeResult,
    TokenPair,
    Tokens,
    Usage,
)

__all__ = [
    "Answer", "AnswerItem", "AnswerResult", "AsyncClient", "Attention", "AttentionBlock", "AttentionOptions", "Client", "EmbedItem", "EmbedResult", "Entity",
    "Fill", "FillItem", "FillMaskResult", "GenerateAttention", "GenerateHidden", "GenerateResult", "GenerateStep", "GenerateToken", "HeadImportanceResult", "HeadwiseError",
    "HiddenState", "HiddenStatesOptions", "Label", "Mask", "ModelInfo", "OcclusionResult", "OcclusionUnit", "PredictResult", "RerankAttention",
    "RerankItem", "RerankResult", "SimilarityItem", "SimilarityResult", "SparseItem", "SparseResult", "TagResult", "TaggedText", "TaggedToken", "TokenPair", "TokenizeItem", "TokenizeResult",
    "Tokens", "Usage", "decode_array",
]
