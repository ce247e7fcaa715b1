"""The special tokens a tokenizer's post-processor adds ([CLS], [SEP], <s>, </s>, <|endoftext|>):
their ids, and where they sit around a text (what a cut shorter than max_len keeps of them)."""

from __future__ import annotations

from typing import NamedTuple

from tokenizers import Tokenizer

PROBE = "a"  # a text every tokenizer reads as ordinary tokens


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
    """The tokenizer's frame, read from its encoding of PROBE; None where its special tokens are
    not all before and after the text, so that a cut cannot be chosen from the text's tokens."""
    bare = len(tok.encode(PROBE, add_special_tokens=False))
    mask = tok.encode(PROBE).special_tokens_mask
    lead = next((i for i, m in enumerate(mask) if not m), len(mask))
    trail = len(mask) - lead - bare
    if trail < 0 or mask != [1] * lead + [0] * bare + [1] * trail:
        return None
    processor = tok.post_processor
    return Frame(lead, trail, processor.num_special_tokens_to_add(True) if processor is not None else 0)


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
