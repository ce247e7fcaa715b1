"""Checkpoint importers: map a local Hugging Face checkpoint directory onto model/ modules.

Checkpoint vocabulary (hidden_size, LayerNorm, Conv1D layouts) stays inside these files.
"""

from headwise.model.importers.common import CheckpointError, load_checkpoint

__all__ = ["CheckpointError", "load_checkpoint"]
