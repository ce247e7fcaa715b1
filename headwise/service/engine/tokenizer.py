"""The package's tokenizer.json through `tokenizers`, with our own padding/truncation rules."""

from __future__ import annotations

import json
from functools import cached_property, partial
from pathlib import Path
from typing import Literal

import numpy as np
from tokenizers import Tokenizer

from headwise import ascii_path
from headwise.service.engine import tails
from headwise.service.engine.encoded import Encoded
from headwise.service.engine.pair_cut import (
    Cut,
    from_the_left,
    kept,
    single_kept,
    window_count,
    windows,
)
from headwise.service.engine.pair_spans import shifted, word_chars
from headwise.service.engine.specials import Frame, frame, processor_ids
from headwise.service.errors import FIELD, TooLarge, Validation

# A text is first tokenised as a prefix of PREFIX_TOKENS characters per token of max_len (a
# token is at least one character), then four times longer while that is not enough. A cut
# word's pieces can add tokens the whole text does not have: CUT_MARGIN of them are allowed.
PREFIX_TOKENS = 8
CUT_MARGIN = 128
PAIR_CHARS = 1 << 21  # characters of pairs one encode_batch reads (beyond a single pair's own)
LEFT = "left"  # `truncate`: cut at the start, keeping the last tokens (service.engine.tails)
Truncate = bool | Literal["left"]  # False: refuse what is too long; True: cut at the end; "left"


class TextTokenizer:
    def __init__(self, file: str | Path, max_len: int, ascii: bool = True):
        """`ascii=False`: every text read the usual way (for comparison; the path's answers are the same)."""
        self.max_len, self.file = max_len, str(file)
        # The file may carry its own padding and truncation (all-MiniLM-L6-v2 pads to 128);
        # they are switched off here and ours apply.
        truncating = Tokenizer.from_file(str(file))
        truncating.no_padding()
        truncating.enable_truncation(max_length=max_len)
        full = Tokenizer.from_file(str(file))
        full.no_padding()
        full.no_truncation()
        # batches' printable ASCII read past BERT's normalizer, with the same answer (headwise.ascii_path)
        self.ascii = ascii_path.AsciiPath.of(file, full) if ascii else None
        self._truncating, self._full = ascii_path.reader(truncating, self.ascii), ascii_path.reader(full, self.ascii)
        self._plain = full

    def encode_unchecked(self, texts: list[str], truncate: Truncate = True, special_tokens: bool = True,
                         lazy: bool = False, strings: bool = True, max_tokens: int | None = None) -> list[Encoded]:
        """Encode, reading each text only as far as its answer needs: the tokenizer keeps every token of what it is
        given (a 15,000-character CJK input is 15,000 tokens, each with its string and offsets) and truncates only
        afterwards. So each text is first given as a prefix of PREFIX_TOKENS × max_len characters; a prefix whose
        tokens pass max_len by CUT_MARGIN is enough (its first max_len tokens are the text's: what truncation keeps,
        or what shows the text is too long), and the others are given again, four times longer, until they are whole.
        Memory then follows the tokens kept, not the input. `special_tokens=False` leaves out what the post-processor
        adds ([CLS], [SEP]). `lazy`: each token's string and offsets are built when first read (Encoded.materialize).
        `strings=False` (with `lazy`: for answers that carry no token strings or offsets) reads the texts with
        `encode_batch_fast`, which tracks no offsets (a fifth less CPU at 128 tokens; the same ids and type ids,
        bench/results/tokenizers.md); a string or offset read after all is built by encoding that text again.
        `truncate="left"` keeps each text's last tokens (service.engine.tails, read from its end). `max_tokens` (with
        truncate; at most max_len): each text cut to that many tokens (pair_cut.single_kept), as the tokenizer's
        truncation at max_length=max_tokens cuts it (from the start, the same ids; a RobertaProcessing that trims
        offsets trims the first kept token's, where the library leaves its first token's: the routes that cut at the
        start to fewer tokens than max_len, vLLM's, answer no offsets)."""
        if truncate == LEFT:
            out = [Encoded(*cut) for cut in tails.singles(self._left, texts, self.max_len, special_tokens,
                                                          PREFIX_TOKENS * self.max_len, CUT_MARGIN)]
        else:
            out = self._singles(texts, truncate, special_tokens, lazy, strings)
        if max_tokens is None or not truncate:
            return out
        if special_tokens and self.frame is None:  # the routes refuse such a cut first (compat.vllm.max_tokens)
            raise Validation("this model's tokenizer puts special tokens within a text: it cuts at max_len only")
        lead, trail = (self.frame.lead, self.frame.trail) if special_tokens else (0, 0)
        return [e if e.length <= max_tokens else e.picked(single_kept(e.length, lead, trail, max_tokens, truncate == LEFT))
                for e in out]

    def _singles(self, texts: list[str], truncate: bool, special_tokens: bool, lazy: bool,
                 strings: bool) -> list[Encoded]:
        tok = self._truncating if truncate else self._full
        fast = lazy and not strings
        batch = tok.encode_batch_fast if fast else tok.encode_batch
        out: list[Encoded | None] = [None] * len(texts)
        todo, chars = self._wordpiece(texts, truncate, special_tokens, out, fast), PREFIX_TOKENS * self.max_len
        while todo:
            cut = [texts[i] if len(texts[i]) <= chars else texts[i][:chars] for i in todo]
            # measured on the untruncated prefix: does it pass max_len by the margin?
            encodings = batch(cut, add_special_tokens=special_tokens)
            counts = ([len(e) for e in encodings] if not truncate else
                      [len(e) + sum(len(o) for o in e.overflowing) for e in encodings])
            again = []
            for i, text, e, n in zip(todo, cut, encodings, counts, strict=True):
                if len(text) == len(texts[i]) or n > self.max_len + CUT_MARGIN:
                    ids, type_ids = np.asarray(e.ids, dtype=np.int64), np.asarray(e.type_ids, dtype=np.int64)
                    if fast:  # only the text is kept (no overflow stays alive)
                        out[i] = Encoded(ids, type_ids, source=partial(tok.encode, text,
                                                                       add_special_tokens=special_tokens))
                        continue
                    enc = Encoded(ids, type_ids, source=e)
                    # lazy only when nothing overflowed: the overflow would stay alive with its source
                    out[i] = enc if lazy and n == len(e) else enc.materialize()
                else:
                    again.append(i)
            todo, chars = again, chars * 4
        return out  # type: ignore[return-value]

    def _wordpiece(self, texts: list[str], truncate: bool, special_tokens: bool, out: list, fast: bool) -> list[int]:
        """Into `out`, the texts headwise.wordpiece reads (the ASCII path's, with a WordPiece
        tokenizer), each read as far as its answer needs: a long one as a prefix of over max_len +
        CUT_MARGIN tokens (truncated, its first max_len are its answer; else it shows the text too
        long), or whole. The compiled reader reads and counts them where there is one
        (headwise.compiled: the same answers; with `fast`, its ids alone, the strings and offsets
        read again if asked for); → the indices of the others."""
        wp = self.ascii.wordpiece if self.ascii is not None else None
        if wp is None:
            return list(range(len(texts)))
        compiled = self.ascii.compiled if fast else None
        read = (self.ascii.compiled or wp).encode
        todo, enough = [], self.max_len + CUT_MARGIN
        limit, added = (self.max_len if truncate else 1 << 62), (wp.added if special_tokens else 0)
        pieces = self.ascii.compiled.pieces if self.ascii.compiled is not None else None
        for i, text in enumerate(texts):
            chars, first, counted = PREFIX_TOKENS * self.max_len, None, None
            while (low := self.ascii.text(text[:chars])) is not None and chars < len(text):
                if pieces is not None:  # counted by the compiled reader, in a fraction of the time
                    if len(counted := pieces(low)) + added > enough:
                        break
                elif len((first := wp.pieces(low, enough + 1))[0]) + added > enough:
                    break
                chars, first, counted = chars * 4, None, None
            if low is None:
                todo.append(i)
                continue
            if first is not None and truncate and (n := wp.room(special_tokens, limit)) < len(first[0]):
                # a long text: the prefix's first pieces, read once to see it is long, are its answer
                ids, type_ids, tokens, offsets = wp.framed(first[0][:n], first[1][:n], first[2][:n], special_tokens)
            elif compiled is not None and (framed := compiled.ids(low, special_tokens, limit, counted)) is not None:
                ids, type_ids = framed
                out[i] = Encoded(np.array(ids, dtype=np.int64), _types(type_ids),
                                 source=partial(compiled.reading, low, special_tokens, limit))
                continue
            else:
                ids, type_ids, tokens, offsets = read(low, special_tokens, limit)
            out[i] = Encoded(np.array(ids, dtype=np.int64), _types(type_ids), tokens, offsets)
        return todo

    @cached_property
    def _left(self) -> Tokenizer:
        """The tokenizer cutting at the start (service.engine.tails), read on the first such request."""
        tok = Tokenizer.from_file(self.file)
        tok.no_padding()
        tok.enable_truncation(max_length=self.max_len, direction="left")
        return tok

    def encode_items(self, items: list, truncate: Truncate = True, words: bool = False,
                     cut: Cut = "longest_first", max_tokens: int | None = None,
                     special_tokens: bool = True) -> list[Encoded]:
        """Texts and (a, b) pairs, each in its order; unchecked (see `check`). A pair is the tokenizer's pair encoding
        (BERT: `[CLS] a [SEP] b [SEP]`, type ids 0 then 1), cut to max_len as transformers cuts it with
        `truncation=cut`: "longest_first" (its default) a token at a time off the end of whichever text is then
        longer, "only_second" off the second text only (a pair whose first text leaves the second no room stays uncut,
        and `check` refuses it). With `words`, a pair's tokens carry their words' characters (`Encoded.words`).
        `max_tokens` (with truncate): cut to that many tokens, not max_len. `special_tokens=False`: texts without them
        (pairs always have theirs)."""
        out: list[Encoded | None] = [None] * len(items)
        singles = [i for i, x in enumerate(items) if isinstance(x, str)]
        if singles:
            for i, e in zip(singles, self.encode_unchecked([items[i] for i in singles], truncate, special_tokens,
                                                           max_tokens=max_tokens), strict=True):
                out[i] = e
        pairs = [i for i, x in enumerate(items) if not isinstance(x, str)]
        if pairs:
            if not special_tokens:
                raise ValueError("pairs are encoded with their special tokens")
            for i, e in zip(pairs, self._encode_pairs([tuple(items[i]) for i in pairs], truncate, words, cut,
                                                      max_tokens or self.max_len), strict=True):
                out[i] = e
        return out  # type: ignore[return-value]

    def _encode_pairs(self, pairs: list[tuple[str, str]], truncate: Truncate, words: bool = False,
                      cut: Cut = "longest_first", max_tokens: int | None = None) -> list[Encoded]:
        """As `encode_unchecked`, each side read only as far as the answer needs: both sides are given as prefixes,
        measured untruncated, four times longer while `_enough` says the whole pair could answer otherwise. With
        truncate, the settled pair's encoding is then cut as the tokenizer's own `encode(a, b)` cuts by `cut`
        (pair_cut.kept): by choosing its tokens, not by encoding again, since the tokenizer's cut keeps every
        overflowing combination of the two sides (memory and time in the product of their lengths), at `max_tokens`
        (max_len when None; what is read for max_len is enough for less). Pairs go to the tokenizer in groups of at
        most PAIR_CHARS characters. `truncate="left"` reads each side from its end and keeps as many of its tokens,
        its last ones (the library's ids; a RobertaProcessing with add_prefix_space and trim_offsets trims a side's
        first kept token's offsets where it does not: no route cutting pairs at the start answers them)."""
        full: list = [None] * len(pairs)
        left = truncate == LEFT
        todo, chars = list(range(len(pairs))), PREFIX_TOKENS * self.max_len
        while todo:
            again = []
            for group in _groups(todo, [min(len(pairs[i][0]), chars) + min(len(pairs[i][1]), chars) for i in todo]):
                heads = [(tails.tail(a, chars), tails.tail(b, chars)) if left else (a[:chars], b[:chars])
                         for a, b in (pairs[i] for i in group)]
                for i, (a, b), e in zip(group, heads, self._full.encode_batch(heads), strict=True):
                    seq = e.sequence_ids
                    whole = (len(a) == len(pairs[i][0]), len(b) == len(pairs[i][1]))
                    if self._enough(whole, (seq.count(0), seq.count(1)), truncate and cut == "longest_first"):
                        # where each side was read from: a tail's offsets move to its place
                        full[i] = e, (len(pairs[i][0]) - len(a), len(pairs[i][1]) - len(b)) if left else (0, 0)
                    else:
                        again.append(i)
            todo, chars = again, chars * 4
        out = []
        for e, shift in full:
            segments = np.asarray([-1 if s is None else s for s in e.sequence_ids], dtype=np.int8)
            keep = kept(segments, max_tokens or self.max_len, cut) if truncate else np.arange(len(segments))
            if left:
                keep = from_the_left(segments, keep)
            tokens, offsets = e.tokens, shifted(e.offsets, segments, shift)
            out.append(Encoded(np.asarray(e.ids, dtype=np.int64)[keep], np.asarray(e.type_ids, dtype=np.int64)[keep],
                               [tokens[k] for k in keep], [offsets[k] for k in keep], segments[keep],
                               words=shifted(word_chars(e, keep), segments[keep], shift) if words else None))
        return out

    def encode_windows(self, pairs: list[tuple[str, str]], max_tokens: int, stride: int, max_rows: int,
                       field: str = "inputs") -> list[list[Encoded]]:
        """Each (question, context) pair in the windows transformers' fast tokenizer reads it in
        with truncation="only_second", max_length=max_tokens, stride and return_overflowing_tokens
        (the question-answering pipeline's max_seq_len and doc_stride), with word spans: chosen
        from the whole pair's encoding (pair_cut.windows). Validation where a question leaves its
        context no more room than `stride`, TooLarge past `max_rows` windows in all."""
        read, rows = [], 0
        for i, pair in enumerate(pairs):  # one at a time: a request is refused at the pair that passes max_rows
            (e,) = self._full.encode_batch([pair])  # whole: the request's characters bound it
            segments = np.asarray([-1 if s is None else s for s in e.sequence_ids], dtype=np.int8)
            try:
                rows += window_count(segments, max_tokens, stride)
            except ValueError as room:
                raise Validation(_no_room(i, int(str(room)), max_tokens, stride), field=field) from None
            if rows > max_rows:
                raise TooLarge(f"the contexts take {rows} windows of {max_tokens} tokens or more, over the limit of "
                               f"{max_rows} rows per request: send shorter contexts, fewer inputs or a smaller "
                               "doc_stride", field=field)
            read.append((e, segments))
        out = []
        for e, segments in read:
            ids, types, tokens, offsets = np.asarray(e.ids, np.int64), np.asarray(e.type_ids, np.int64), e.tokens, e.offsets
            out.append([Encoded(ids[k], types[k], [tokens[j] for j in k], [offsets[j] for j in k], segments[k],
                                words=word_chars(e, k)) for k in windows(segments, max_tokens, stride)])
        return out

    def _enough(self, whole: tuple[bool, bool], counts: tuple[int, int], truncate: bool) -> bool:
        """Whether a pair's prefixes (`whole`: each side's is its whole text; `counts`: their
        tokens, untruncated) answer as the whole texts. A cut side past max_len by CUT_MARGIN
        begins with the whole text's tokens, and is too long either way. Cut by longest_first
        (tokenizers' truncate_encodings), what each side keeps depends on which side is longer
        (the shorter one, or the first of equals, keeps up to its whole length, and when both
        are cut the longer keeps max_len's odd token): so a cut side must also be longer than
        the other side for sure, that side whole and this one past its length by CUT_MARGIN.
        `truncate` is whether longest_first cuts: only_second's cut keeps the first text whole
        and the second's first tokens, as an uncut pair's check reads them."""
        enough = self.max_len + CUT_MARGIN
        (whole_a, whole_b), (na, nb) = whole, counts
        if not truncate:
            return (whole_a or na > enough) and (whole_b or nb > enough)
        if whole_a and whole_b:
            return True
        if whole_a:
            return nb > max(enough, na + CUT_MARGIN)
        if whole_b:
            return na > max(enough, nb + CUT_MARGIN)
        return False

    def check(self, encs: list[Encoded], field: str = "inputs", truncated: bool = False,
              cut: Cut = "longest_first", max_tokens: int | None = None, run: bool = False) -> None:
        """An input over max_len raises Validation (422) naming `field`[i]: one not cut
        (`truncated` false: cutting would answer it), or a pair whose first text leaves the
        second no room, which cutting only the second (`cut`) cannot answer (within
        `max_tokens` where it is the cut's length). With `run` (for the model), one of no tokens too."""
        limit = max_tokens or self.max_len
        within = f"this model's limit of {limit}" if max_tokens is None else f"the {limit} tokens asked for"
        for i, e in enumerate(encs):
            if run and not e.length:  # a text read without special tokens may have none: nothing to run
                raise Validation(f"{FIELD}[{i}] has no tokens (without special tokens): send a text", field=field)
            if e.length > limit:
                if e.segments is not None and (truncated or cut == "only_second") and int(
                        (e.segments != 1).sum()) >= limit:
                    raise Validation(f"{FIELD}[{i}]'s first text has {int((e.segments == 0).sum())} tokens or more, "
                                     f"which leaves its second no room within {within} (only the second is cut): "
                                     "send a shorter one", field=field)
                raise Validation(
                    f"{FIELD}[{i}] has {e.length} tokens or more, over this model's limit of "
                    f"{self.max_len} (send truncate: true to cut it)", field=field)

    @property
    def untruncated(self) -> Tokenizer:
        """The `tokenizers` tokenizer itself, without truncation or padding: for what Encoded
        does not keep (word ids: service.engine.analytics.spans)."""
        return self._plain

    @property
    def vocab_size(self) -> int:
        return self._full.get_vocab_size(with_added_tokens=True)

    def check_ids(self, seqs: list[list[int]]) -> None:
        """Pre-tokenised inputs: each non-empty, at most max_len ids, each in the vocabulary."""
        n = self.vocab_size
        for i, s in enumerate(seqs):
            if not s or len(s) > self.max_len:
                raise Validation(f"{FIELD}[{i}] has {len(s)} token ids; this model takes 1..{self.max_len}", field="inputs")
            if min(s) < 0 or max(s) >= n:
                raise Validation(f"{FIELD}[{i}]: token ids must be in 0..{n - 1}", field="inputs")

    def from_ids(self, seqs: list[list[int]]) -> list[Encoded]:
        """Ids used as they are (no special tokens added), type ids 0, no character offsets."""
        tok = self._full
        return [Encoded(np.asarray(s, dtype=np.int64), np.zeros(len(s), dtype=np.int64),
                        [tok.id_to_token(i) or "" for i in s], [(0, 0)] * len(s)) for s in seqs]

    def encode_whole(self, texts: list[str], special_tokens: bool = True) -> list[Encoded]:
        """Every token of each text, not cut nor checked (/tokenize): read whole, where
        encode_unchecked stops once a text shows itself over max_len."""
        return [Encoded(np.asarray(e.ids, dtype=np.int64), np.asarray(e.type_ids, dtype=np.int64), source=e).materialize()
                for e in self._full.encode_batch(texts, add_special_tokens=special_tokens)]

    def encode(self, texts: list[str], truncate: Truncate = True, special_tokens: bool = True,
               field: str = "inputs") -> list[Encoded]:
        """Batch-encode; with truncate=False an input over max_len raises Validation (422) naming `field`[i]."""
        encs = self.encode_unchecked(texts, truncate, special_tokens)
        self.check(encs, field)
        return encs

    @cached_property
    def special_ids(self) -> frozenset[int]:
        """Ids of the special tokens: the added ones marked special ([PAD], [MASK], ...) and
        those the post-processor adds ([CLS], [SEP])."""
        added = {i for i, t in self._full.get_added_tokens_decoder().items() if t.special}
        return frozenset(added | processor_ids(json.loads(self._full.to_str()).get("post_processor")))

    @cached_property
    def frame(self) -> Frame | None:
        """Where the post-processor's special tokens sit around a text (None: not only around it)."""
        return frame(self._plain)

    @cached_property
    def word_aware(self) -> bool:
        """Whether the model marks a word's later pieces (WordPiece's "##"), so that a piece
        can be told from a word by its string alone (transformers' token-classification
        pipeline asks the same of the model's `continuing_subword_prefix`)."""
        return bool(getattr(self._full.model, "continuing_subword_prefix", None))

    @cached_property
    def unk_id(self) -> int | None:
        """The unknown token's id: the model's own (WordPiece, BPE), else `<unk>`'s (Unigram)."""
        unk = getattr(self._full.model, "unk_token", None) or "<unk>"
        return self._full.token_to_id(unk)

    def join(self, tokens: list[str]) -> str:
        """Token strings as the tokenizer's decoder joins them ("##" pieces glued), as
        transformers' `convert_tokens_to_string` does."""
        decoder = self._full.decoder
        return decoder.decode(tokens) if decoder is not None else " ".join(tokens)

    def decode(self, seqs: list[list[int]], skip_special_tokens: bool = True) -> list[str]:
        """Token ids back to text, as the tokenizer's decoder joins them (WordPiece's "##"
        pieces glued); ids outside the vocabulary raise Validation."""
        n = self.vocab_size
        for i, s in enumerate(seqs):
            if s and (min(s) < 0 or max(s) >= n):
                raise Validation(f"{FIELD}[{i}]: token ids must be in 0..{n - 1}", field="ids")
        return self._full.decode_batch(seqs, skip_special_tokens=skip_special_tokens)


def _groups(items, sizes: list[int], budget: int = PAIR_CHARS):
    """`items` in order, in groups whose `sizes` sum to at most `budget` (or of one item)."""
    group, n = [], 0
    for i, size in zip(items, sizes, strict=True):
        if group and n + size > budget:
            yield group
            group, n = [], 0
        group.append(i)
        n += size
    if group:
        yield group


def _types(type_ids: list[int]) -> np.ndarray:
    return np.array(type_ids, dtype=np.int64) if any(type_ids) else np.zeros(len(type_ids), np.int64)


def _no_room(i: int, room: int, max_tokens: int, stride: int) -> str:
    """Why pair i cannot be read in windows: its question leaves its context `room` tokens."""
    if room <= 0:
        return (f"{FIELD}[{i}]'s question and special tokens take {max_tokens - room} tokens, a whole window of "
                f"max_seq_len={max_tokens} or more: send a larger max_seq_len or a shorter question")
    return (f"{FIELD}[{i}]'s question and special tokens leave its context {room} of the {max_tokens} tokens of a "
            f"window, not more than doc_stride={stride}: send a smaller doc_stride, a larger max_seq_len or a "
            "shorter question")
