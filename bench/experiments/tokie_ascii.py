"""Issue 37, item 6, asked again on the ASCII path: would a compiled tokenizer (tokie) give
headwise.wordpiece's answers on the texts that path reads, and for how much less CPU?

    python -m bench.experiments.tokie_ascii --tokenizer /tmp/pm-models/all-minilm-l6-v2/tokenizer.json \
        --reps 5 --out bench/results/tokie-ascii.md

Texts: those of the STS-B, multilingual and hostile sets (headwise.export.text_sets) that the
ASCII path takes (`AsciiPath.text` is not None), and 20,000 seeded random strings of printable
ASCII (those it takes). For each: ids, tokens and character offsets (special tokens included)
from tokie's `encode_with_offsets` against `WordPiece.encode` (which `headwise export` checks
against `tokenizers`), and the offsets again re-derived from the tokens (`fixed`: headwise.compiled.mend, a continuation piece starts where
the piece before it ended and spans its token less the prefix). CPU: `time.process_time` per input over the STS-B
sentences, a first pass (caches cold) and then `--reps` passes alternating the readers.

Adopted since as headwise.compiled (tokie pinned in constraints.txt): its reading, the spans
mended, is compared the same way (`compiled`), and timed beside the other two.
"""

from __future__ import annotations

import argparse
import random
import statistics
import string
import time
from pathlib import Path

from bench.alternate import turn
from headwise.compiled import mend


def texts_read(ascii_path) -> dict[str, list[str]]:
    from headwise.export.text_sets import hostile, multilingual, stsb

    rng = random.Random(0)
    randoms = ["".join(rng.choice(string.printable) for _ in range(rng.randint(0, 200))) for _ in range(20_000)]
    sets = {"stsb": stsb(), "multilingual": multilingual(), "hostile": hostile(), "random printable": randoms}
    return {k: [t for t in v if ascii_path.text(t) is not None] for k, v in sets.items()}


def compare(tok, wp, ascii_path, texts: list[str]) -> dict[str, int]:
    """Per text: tokie's raw answer against headwise.wordpiece's, and headwise.compiled's whole reading."""
    out = {"texts": len(texts), "ids": 0, "tokens": 0, "offsets": 0, "offsets, fixed": 0, "compiled": 0}
    for text in texts:
        want = wp.encode(ascii_path.text(text), True, 1 << 62)
        ids, _, tokens, offsets = want
        e = tok.encode_with_offsets(text)
        theirs = [tuple(o) for o in e.offsets]
        out["ids"] += list(e.ids) != ids
        out["tokens"] += list(e.tokens) != tokens
        out["offsets"] += theirs != [tuple(o) for o in offsets]
        later = [i for i, t in enumerate(e.tokens) if t.startswith(wp.prefix)]
        mend(list(e.tokens), theirs, later)
        out["offsets, fixed"] += theirs != [tuple(o) for o in offsets]
        out["compiled"] += ascii_path.compiled.encode(ascii_path.text(text), True, 1 << 62) != want
    return out


def novel(sentences: list[str], n: int, seed) -> list[str]:
    """`n` texts of 16 words drawn from `sentences`' words: texts no reader has seen (`seed`
    picks them), with the words' frequencies of real ones."""
    rng = random.Random(repr(seed))
    words = " ".join(sentences).split()
    return [" ".join(rng.choice(words) for _ in range(16)) for _ in range(n)]


def cpu_per_input(fn, texts: list[str]) -> float:
    t0 = time.process_time()
    for text in texts:
        fn(text)
    return (time.process_time() - t0) / len(texts) * 1e6


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--tokenizer", required=True, help="a package's tokenizer.json (a WordPiece one)")
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--out", type=Path)
    a = ap.parse_args()
    import tokie

    from headwise.service.engine.tokenizer import TextTokenizer

    tt = TextTokenizer(a.tokenizer, 256)
    wp, ascii_path = tt.ascii.wordpiece, tt.ascii
    tok = tokie.Tokenizer.from_json(a.tokenizer)
    tok.no_padding()
    tok.no_truncation()
    sets = texts_read(ascii_path)
    rows = {k: compare(tok, wp, ascii_path, v) for k, v in sets.items()}

    sample = sets["stsb"]
    sides = {"tokie encode_with_offsets": tok.encode_with_offsets,
             "headwise.wordpiece (ASCII path)": lambda t: wp.encode(ascii_path.text(t), True, 254),
             "headwise.compiled (adopted)": lambda t: ascii_path.compiled.encode(ascii_path.text(t), True, 254)}
    first = {k: cpu_per_input(f, sample) for k, f in sides.items()}
    runs: dict[str, list[float]] = {k: [] for k in sides}
    fresh: dict[str, list[float]] = {k: [] for k in sides}
    for rep in range(a.reps):
        for k in turn(list(sides), rep):
            runs[k].append(cpu_per_input(sides[k], sample))
            fresh[k].append(cpu_per_input(sides[k], novel(sample, 3000, seed=(rep, k))))

    from headwise.export import cpu as cpu_info

    lines = ["# tokie on the ASCII path's texts (issue 37, item 6)", "",
             f"{cpu_info.label()}, tokie {tokie.__version__ if hasattr(tokie, '__version__') else '0.1.4'}, "
             f"{time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}.", "",
             f"    python -m bench.experiments.tokie_ascii --tokenizer {a.tokenizer} --reps {a.reps}", "",
             "Texts that differ from headwise.wordpiece (= `tokenizers` on these texts):", "",
             "| set | texts | ids | tokens | offsets | offsets re-derived (`fixed`) | headwise.compiled, whole |",
             "|---|---:|---:|---:|---:|---:|---:|"]
    lines += [f"| {k} | {r['texts']:,} | {r['ids']} | {r['tokens']} | {r['offsets']:,} | {r['offsets, fixed']} | "
              f"{r['compiled']} |"
              for k, r in rows.items()]
    lines += ["", f"CPU µs per input over the {len(sample):,} STS-B sentences the path reads (special tokens "
              f"included), first pass and the median of {a.reps} alternating passes:", "",
              "| reader | first pass | median (min–max) |", "|---|---:|---:|"]
    lines += [f"| {k} | {first[k]:.2f} | {statistics.median(v):.2f} ({min(v):.2f}–{max(v):.2f}) |" for k, v in runs.items()]
    lines += ["", "The same over texts each reader sees once (tokie keeps a cache, so the passes above flatter "
              "it): per pass 3,000 new texts of 16 words drawn from the STS-B sentences, another set for each "
              "reader and pass:", "", "| reader | median (min–max) |", "|---|---:|"]
    lines += [f"| {k} | {statistics.median(v):.2f} ({min(v):.2f}–{max(v):.2f}) |" for k, v in fresh.items()]
    text = "\n".join(lines) + "\n"
    print(text)
    if a.out:
        a.out.write_text(text)


if __name__ == "__main__":
    main()
