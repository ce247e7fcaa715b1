"""Checkpoint importers: map a local Hugging Face checkpoint directory onto model/ modules.

Checkpoint vocabulary (hidden_size, LayerNorm, Conv1D layouts) stays inside these files:
`common` reads files and copies tensors by key map, one module per family (`bert`, `gpt2`,
`marian`) maps its checkpoints, and `registry` picks the family of a directory.
"""

from headwise.model.importers.common import CheckpointError
from headwise.model.importers.registry import (
    checkpoint_architecture,
    checkpoint_heads,
    load_checkpoint,
)

__all__ = ["CheckpointError", "checkpoint_architecture", "checkpoint_heads", "load_checkpoint"]
