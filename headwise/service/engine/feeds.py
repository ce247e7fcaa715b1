"""A batch's graph inputs (the encoder's, on the batcher's inference thread)."""

from __future__ import annotations

import numpy as np

from headwise.service.engine.work import Entry
from headwise.service.package import ModelPackage


def batch_feeds(package: ModelPackage, entries: list[Entry], padded: int, role: str = "embed") -> dict[str, np.ndarray]:
    """The graph's inputs for a batch: ids right-padded with pad_id, mask 1 on real tokens (0
    at each entry's holes); the analysis graph's head mask, 0 at each entry's removed heads."""
    b = len(entries)
    lengths = np.fromiter([e.length for e in entries], np.int64, b)
    real = np.arange(padded) < lengths[:, None]  # (B, padded): each row's first `length` cells
    ids = np.full((b, padded), package.pad_id, dtype=np.int64)
    ids[real] = np.concatenate([e.ids for e in entries])  # a boolean mask fills row by row
    types = np.zeros((b, padded), dtype=np.int64)
    types[real] = np.concatenate([e.type_ids for e in entries])
    mask = real.astype(np.int64)
    for i, e in enumerate(entries):
        if e.holes:
            mask[i, list(e.holes)] = 0
    feeds = {"input_ids": ids, "attention_mask": mask, "token_type_ids": types}
    if role == "analysis":
        head_mask = np.ones((b, package.n_layers, package.n_heads), dtype=np.float32)  # (B, L, H)
        for i, e in enumerate(entries):
            ablate = e.ablate if e.ablate is not None else e.job.params.ablate
            if ablate is not None:
                head_mask[i] = ablate.mask(package.n_layers, package.n_heads)
        feeds["head_mask"] = head_mask
    return feeds
