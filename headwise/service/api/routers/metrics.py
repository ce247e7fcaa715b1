"""GET /metrics: Prometheus text format (all workers merged in multiprocess mode)."""

from __future__ import annotations

from fastapi import APIRouter, Request
from starlette.responses import Response

router = APIRouter(tags=["metrics"])


@router.get("/metrics", response_class=Response)
async def metrics(request: Request):
    m = request.app.state.metrics
    return Response(m.render(), media_type=m.content_type)
