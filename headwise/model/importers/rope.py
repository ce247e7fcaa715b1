"""Reading a rotary base θ from config.json in either form transformers has written: the
older top-level `rope_theta` (+ `rope_scaling`), or transformers 5's `rope_parameters`
({"rope_type": "default", "rope_theta": ...}, per layer type for ModernBERT)."""

from __future__ import annotations

from headwise.model.importers.common import CheckpointError


def rope_theta(raw: dict, layer_type: str | None = None, default: float = 10000.0, legacy: str = "rope_theta") -> float:
    """θ of plain ("default") RoPE; any scaled variant (YaRN, linear, dynamic ...) is refused
    by name. `layer_type`: the key of a per-layer-type rope_parameters; `legacy`: the
    top-level key older configs use for it."""
    params = raw.get("rope_parameters")
    if isinstance(params, dict) and layer_type is not None and layer_type in params:
        params = params[layer_type]
    elif isinstance(params, dict) and layer_type is not None:
        params = None
    scaling = raw.get("rope_scaling")
    for p in (params, scaling):
        kind = (p or {}).get("rope_type", (p or {}).get("type", "default"))
        if kind != "default":
            raise CheckpointError(f"rotary scaling {kind!r} is not supported (plain RoPE only)")
    if isinstance(params, dict) and "rope_theta" in params:
        return float(params["rope_theta"])
    return float(raw.get(legacy, default))
