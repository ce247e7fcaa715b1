"""OpenAPI for bodies the compatible routes parse themselves (FastAPI cannot see them)."""

from __future__ import annotations

from pydantic import BaseModel


def _resolve(node, defs: dict):
    if isinstance(node, dict):
        ref = node.get("$ref")
        if isinstance(ref, str) and ref.startswith("#/$defs/"):
            return _resolve(defs[ref.split("/")[-1]], defs)
        return {k: _resolve(v, defs) for k, v in node.items()}
    if isinstance(node, list):
        return [_resolve(v, defs) for v in node]
    return node


def inline_schema(model: type[BaseModel]) -> dict:
    """The model's JSON schema with its $defs inlined, so it needs no components entry."""
    s = model.model_json_schema()
    defs = s.pop("$defs", {})
    return _resolve(s, defs)


def request_body(model: type[BaseModel], **more_content: dict) -> dict:
    """`openapi_extra` for a body parsed by hand: JSON per `model`, plus other media types."""
    content = {"application/json": {"schema": inline_schema(model)}, **more_content}
    return {"requestBody": {"required": True, "content": content}}
