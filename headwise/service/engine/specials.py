"""The special tokens a tokenizer's post-processor adds ([CLS], [SEP], <s>, </s>, <|endoftext|>):
their ids, and where they sit around a text (what a cut shorter than max_len keeps of them)."""

from __future__ import annotations

import itertools
from typing import NamedTuple

from tokenizers import Tokenizer

PROBES = ("a", "the", "1")  # texts a tokenizer reads as ordinary tokens; then words of its vocabulary
VOCABULARY_PROBES = 16


class Frame(NamedTuple):
    """The special tokens the post-processor puts before (`lead`) and after (`trail`) a single
    text, and around a pair in all (`pair`)."""

    lead: int
    trail: int
    pair: int

    @property
    def single(self) -> int:
        return self.lead + self.trail


def frame(tok: Tokenizer) -> Frame | None:
    """The tokenizer's frame, read from its encoding of the first probe it reads as tokens:
    the tokens of no sequence (`sequence_ids` None: the post-processor's) before and after
    them. None where no probe is read (a cut could not be told from the text's tokens), or
    where the special tokens are not all before and after the text."""
    processor = tok.post_processor
    added = processor.num_special_tokens_to_add(False) if processor is not None else 0
    for text in _probes(tok):
        try:
            seq = tok.encode(text).sequence_ids
        except Exception:  # a text it cannot read (a word-level vocabulary without its unknown token)
            continue
        mine = [i for i, s in enumerate(seq) if s is not None]
        if not mine:
            continue
        lead, trail = mine[0], len(seq) - 1 - mine[-1]
        if len(mine) != len(seq) - lead - trail or lead + trail != added:
            return None
        return Frame(lead, trail, processor.num_special_tokens_to_add(True) if processor is not None else 0)
    return None


def _probes(tok: Tokenizer):
    yield from PROBES
    yield from itertools.islice((t for t in tok.get_vocab(with_added_tokens=False) if t.isalnum()), VOCABULARY_PROBES)


def processor_ids(node) -> set[int]:
    """The token ids a post-processor's JSON names: TemplateProcessing's special_tokens' "ids",
    BertProcessing's and RobertaProcessing's "cls"/"sep" [token, id], within Sequence too."""
    out: set[int] = set()
    if isinstance(node, dict):
        for key, value in node.items():
            if key == "ids" and isinstance(value, list) and all(isinstance(i, int) for i in value):
                out.update(value)
            elif key in ("cls", "sep") and isinstance(value, list) and len(value) == 2 and isinstance(value[1], int):
                out.add(value[1])
            else:
                out |= processor_ids(value)
    elif isinstance(node, list):
        for value in node:
            out |= processor_ids(value)
    return out
