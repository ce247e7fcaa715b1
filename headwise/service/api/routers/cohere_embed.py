"""POST /v2/embed in Cohere's v2 shape (docs/api.md). Errors in Cohere's shape."""

from __future__ import annotations

from fastapi import APIRouter, Depends

from headwise.service.api.dependencies import require_api_key
from headwise.service.api.errors import COHERE, route_class

router = APIRouter(tags=["cohere"], route_class=route_class(COHERE), dependencies=[Depends(require_api_key)])
