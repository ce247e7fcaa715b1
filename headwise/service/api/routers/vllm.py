"""vLLM's pooling routes: POST /score, /v1/score, /classify, /v1/classify (docs/api.md).
Errors in vLLM's (OpenAI's) shape."""

from __future__ import annotations

from fastapi import APIRouter, Depends

from headwise.service.api.dependencies import require_api_key
from headwise.service.api.errors import VLLM, route_class

router = APIRouter(tags=["vllm"], route_class=route_class(VLLM), dependencies=[Depends(require_api_key)])
