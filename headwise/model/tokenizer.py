"""The checkpoint's own tokenizer.json through the `tokenizers` library, truncating at max_len."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

import torch
from tokenizers import Tokenizer as HFTokenizer
from torch import Tensor


@dataclass
class Batch:
    input_ids: Tensor  # (B, T) int64
    attention_mask: Tensor  # (B, T) int64
    token_type_ids: Tensor  # (B, T) int64
    tokens: list[list[str]]
    offsets: list[list[tuple[int, int]]]


def pad_id(tok: HFTokenizer, folder: Path) -> int:
    """The padding token's id: tokenizer_config.json's pad_token where the checkpoint has one
    (RoBERTa's <pad> is 1), else [PAD] or <pad>, else 0."""
    f = folder / "tokenizer_config.json"
    named = json.loads(f.read_text()).get("pad_token") if f.is_file() else None
    if isinstance(named, dict):  # an AddedToken written out
        named = named.get("content")
    for name in (named, "[PAD]", "<pad>"):
        found = tok.token_to_id(name) if isinstance(name, str) else None
        if found is not None:
            return found
    return 0


class Tokenizer:
    def __init__(self, path: str | Path, max_len: int):
        path = Path(path)
        file = path / "tokenizer.json" if path.is_dir() else path
        if not file.is_file():
            raise FileNotFoundError(f"{file}: no tokenizer.json")
        self.max_len = max_len
        self._tok = HFTokenizer.from_file(str(file))
        # The file may carry its own padding/truncation (all-MiniLM-L6-v2 pads to 128): ours rule.
        self._tok.no_padding()
        self._tok.enable_truncation(max_length=max_len)
        self.pad_id = pad_id(self._tok, file.parent)

    def __call__(self, texts: list[str]) -> Batch:
        enc = self._tok.encode_batch(texts)
        t = max(len(e.ids) for e in enc)
        ids = torch.full((len(enc), t), self.pad_id, dtype=torch.long)
        mask = torch.zeros((len(enc), t), dtype=torch.long)
        types = torch.zeros((len(enc), t), dtype=torch.long)
        for i, e in enumerate(enc):
            n = len(e.ids)
            ids[i, :n] = torch.tensor(e.ids)
            mask[i, :n] = 1
            types[i, :n] = torch.tensor(e.type_ids)
        return Batch(ids, mask, types, [e.tokens for e in enc], [list(e.offsets) for e in enc])
