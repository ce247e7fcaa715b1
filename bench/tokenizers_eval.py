"""Faster tokenizers than `tokenizers`? (issue 37, item 6.) For the packaged all-MiniLM-L6-v2
tokenizer.json: CPU µs per input at about 20 and 128 tokens, and whether each candidate's ids
equal the service's (TextTokenizer: special tokens added, truncated at the package's max_len)
on every input of three sets: the STS-B dev sentences the repository ships
(headwise/export/data/stsb), a multilingual set (headwise/export/data/multilingual.txt and variants of
it), and hostile unicode (`hostile()`).

    .venv/bin/python -m bench.tokenizers_eval [--reps 5] [--batch 32] [--seconds 0.15]
                                              [--only tokenizers,kitoken] [--no-timing]

Candidates: `tokenizers` encode_batch and encode_batch_fast (the library the service uses),
TextTokenizer.encode_unchecked as the embedding head calls it (with strings, and with
strings=False: encode_batch_fast), each with its ASCII path (headwise.ascii_path: headwise.wordpiece
where it reads the text), with the path's twin tokenizer only (as before headwise.wordpiece), and without it,
and, when installed, kitoken, tokie and flash-tokenizer
(BERT only: it reads vocab.txt). A candidate that is not installed, or fails to load, is
skipped with the reason. They are not dependencies of headwise: install them by hand to
evaluate them (`.venv/bin/pip install kitoken tokie flash-tokenizer`).

CPU time is `time.process_time` (every thread of the process) across repeated batch calls of
`--batch` inputs, over at least `--seconds` per sample; every candidate runs one thread
(TOKENIZERS_PARALLELISM=false as the service's front-ends set it, RAYON_NUM_THREADS=1), and the
candidates take turns within each repetition, in a rotated order. A sample is CPU µs per
input; the table gives the median over repetitions and their range.

An input matches when the candidate gives the same ids, or when both it and the reference
refuse it (an exception: `tokenizers` refuses a lone surrogate, as its text cannot be UTF-8).
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import statistics
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from tokenizers import Tokenizer

from bench.alternate import turns
from bench.args import strs
from headwise.export.text_sets import hostile, multilingual, stsb

ERROR = "error"  # an input the tokenizer refused


def model_dir() -> Path:
    from headwise.model.sentence import default_checkpoint

    return default_checkpoint()


def max_len(folder: Path) -> int:
    """The package's max_len, as headwise export sets it (256 for all-MiniLM-L6-v2)."""
    from headwise.model.sentence import max_seq_length

    return max_seq_length(folder, 512)


SETS: dict[str, Callable[[], list[str]]] = {"stsb": stsb, "multilingual": multilingual, "hostile": hostile}


# -- the candidates -----------------------------------------------------------------------

@dataclass
class Candidate:
    name: str
    run: Callable[[list[str]], object]  # what is timed: the batch call as it would be used
    ids: Callable[[list[str]], list[list[int]]]  # each input's ids, for the comparison


def special_pair(file: Path) -> tuple[int, int]:
    """[CLS] and [SEP] ids as the tokenizer's own post-processor adds them."""
    tok = Tokenizer.from_file(str(file))
    tok.no_padding()
    ids = tok.encode("", add_special_tokens=True).ids
    if len(ids) != 2:
        raise RuntimeError(f"expected the post-processor to add two tokens to an empty text, got {ids}")
    return ids[0], ids[1]


def wrapped(content: list[int], cls: int, sep: int, n: int) -> list[int]:
    """[CLS] content [SEP], the content cut so that the whole is at most n ids (TemplateProcessing
    with truncation at n)."""
    return [cls, *content[: n - 2], sep]


def tokenizers_candidates(folder: Path, n: int) -> list[Candidate]:
    from headwise.service.engine.tokenizer import TextTokenizer

    tok = Tokenizer.from_file(str(folder / "tokenizer.json"))
    tok.no_padding()
    tok.enable_truncation(max_length=n)
    tt = TextTokenizer(folder / "tokenizer.json", n)
    usual = TextTokenizer(folder / "tokenizer.json", n, ascii=False)
    twin = TextTokenizer(folder / "tokenizer.json", n)
    twin.ascii.wordpiece = None  # the ASCII path as before headwise.wordpiece: its twin tokenizer only
    return [
        Candidate("tokenizers encode_batch", lambda t: [e.ids for e in tok.encode_batch(t)],
                  lambda t: [e.ids for e in tok.encode_batch(t)]),
        Candidate("tokenizers encode_batch_fast", lambda t: [e.ids for e in tok.encode_batch_fast(t)],
                  lambda t: [e.ids for e in tok.encode_batch_fast(t)]),
        Candidate("TextTokenizer (strings)", lambda t: tt.encode_unchecked(t, lazy=True),
                  lambda t: [e.ids.tolist() for e in tt.encode_unchecked(t, lazy=True)]),
        Candidate("TextTokenizer (strings=False)", lambda t: tt.encode_unchecked(t, lazy=True, strings=False),
                  lambda t: [e.ids.tolist() for e in tt.encode_unchecked(t, lazy=True, strings=False)]),
        Candidate("TextTokenizer (strings), twin only", lambda t: twin.encode_unchecked(t, lazy=True),
                  lambda t: [e.ids.tolist() for e in twin.encode_unchecked(t, lazy=True)]),
        Candidate("TextTokenizer (strings=False), twin only", lambda t: twin.encode_unchecked(t, lazy=True, strings=False),
                  lambda t: [e.ids.tolist() for e in twin.encode_unchecked(t, lazy=True, strings=False)]),
        Candidate("TextTokenizer (strings), ASCII path off", lambda t: usual.encode_unchecked(t, lazy=True),
                  lambda t: [e.ids.tolist() for e in usual.encode_unchecked(t, lazy=True)]),
        Candidate("TextTokenizer (strings=False), ASCII path off",
                  lambda t: usual.encode_unchecked(t, lazy=True, strings=False),
                  lambda t: [e.ids.tolist() for e in usual.encode_unchecked(t, lazy=True, strings=False)]),
    ]


def kitoken_candidate(folder: Path, n: int) -> Candidate:
    """kitoken reads tokenizer.json, but pads and truncates by its own config (the file's
    Fixed 128) and adds no [CLS]/[SEP]: its processing is switched off here and the two ids
    added around the content as TemplateProcessing would, cut at n."""
    import kitoken

    k = kitoken.Kitoken.from_tokenizers_file(str(folder / "tokenizer.json"))
    config = k.config()
    config["processing"] = []
    k.set_config(config)
    cls, sep = special_pair(folder / "tokenizer.json")

    def ids(texts: list[str]) -> list[list[int]]:
        return [wrapped(c, cls, sep, n) for c in k.encode_all(texts, True)]  # True: "[SEP]" in text is the token

    return Candidate(f"kitoken {_version('kitoken')}", ids, ids)


def tokie_candidate(folder: Path, n: int) -> Candidate:
    """tokie reads tokenizer.json and adds the post-processor's tokens, but not its padding or
    truncation: truncation at n is set here. Timed as `encode_batch_flat` (ids and lengths as
    two numpy arrays, no object per input: its fastest ids-only call)."""
    import numpy as np
    import tokie

    t = tokie.Tokenizer.from_json(str(folder / "tokenizer.json"))
    t.enable_truncation(n)

    def ids(texts: list[str]) -> list[list[int]]:
        flat, lengths = t.encode_batch_flat(texts)
        return [a.tolist() for a in np.split(flat, np.cumsum(lengths)[:-1])] if len(texts) else []

    return Candidate(f"tokie {_version('tokie')}", lambda texts: t.encode_batch_flat(texts), ids)


def flash_candidate(folder: Path, n: int) -> Candidate:
    """flash-tokenizer is BERT's WordPiece on vocab.txt (it does not read tokenizer.json): lower
    case and CJK splitting as tokenizer_config.json says."""
    from flash_tokenizer import BertTokenizerFlash

    config = json.loads((folder / "tokenizer_config.json").read_text())
    f = BertTokenizerFlash(str(folder / "vocab.txt"), do_lower_case=config.get("do_lower_case", True),
                           model_max_length=n, tokenize_chinese_chars=config.get("tokenize_chinese_chars", True))
    _, sep = special_pair(folder / "tokenizer.json")

    def ids(texts: list[str]) -> list[list[int]]:
        rows = f(texts, padding="longest", max_length=n, do_multiprocess=False)["input_ids"]
        return [r[: len(r) - r[::-1].index(sep)] if sep in r else list(r) for r in rows]  # padding off

    return Candidate(f"flash-tokenizer {_version('flash-tokenizer')}", ids, ids)


OPTIONAL: dict[str, tuple[str, Callable[[Path, int], Candidate]]] = {
    "kitoken": ("kitoken", kitoken_candidate),
    "tokie": ("tokie", tokie_candidate),
    "flash-tokenizer": ("flash_tokenizer", flash_candidate),
}


def _version(dist: str) -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version(dist)
    except PackageNotFoundError:
        return "?"


def candidates(folder: Path, n: int, only: list[str] | None) -> tuple[list[Candidate], dict[str, str]]:
    """The candidates that load, and for each that does not, why."""
    out = tokenizers_candidates(folder, n) if not only or "tokenizers" in only else []
    skipped: dict[str, str] = {}
    for name, (module, make) in OPTIONAL.items():
        if only and name not in only:
            continue
        try:
            __import__(module)
        except ImportError as e:
            skipped[name] = f"not installed ({e.msg}); `.venv/bin/pip install {name}` to evaluate it"
            continue
        try:
            c = make(folder, n)
            c.ids(["warm up"])
        except Exception as e:  # a candidate that cannot read this tokenizer
            skipped[name] = f"failed to load: {type(e).__name__}: {e}"
            continue
        out.append(c)
    return out, skipped


# -- comparison ---------------------------------------------------------------------------

def outcomes(ids: Callable[[list[str]], list[list[int]]], texts: list[str], chunk: int = 256) -> list:
    """Each input's ids, or ERROR where the tokenizer refuses it (tried alone when its chunk fails)."""
    out: list = []
    for at in range(0, len(texts), chunk):
        part = texts[at:at + chunk]
        try:
            out += [list(x) for x in ids(part)]
        except BaseException as e:  # a Rust panic surfaces as BaseException
            if isinstance(e, KeyboardInterrupt):
                raise
            for t in part:
                try:
                    out.append(list(ids([t])[0]))
                except BaseException as e1:
                    if isinstance(e1, KeyboardInterrupt):
                        raise
                    out.append(ERROR)
    return out


def mismatches(reference: list, got: list, texts: list[str], show: int = 5) -> tuple[int, list[str]]:
    bad = [i for i, (a, b) in enumerate(zip(reference, got, strict=True)) if a != b]
    examples = []
    for i in bad[:show]:
        a, b = reference[i], got[i]
        at = next((j for j, (x, y) in enumerate(zip(a, b, strict=False)) if x != y), min(len(a), len(b))) if ERROR not in (a, b) else 0
        examples.append(f"{texts[i][:40]!r}: tokenizers {a if a == ERROR else a[max(0, at - 1):at + 3]} "
                        f"vs {b if b == ERROR else b[max(0, at - 1):at + 3]} (at {at})")
    return len(bad), examples


# -- timing -------------------------------------------------------------------------------

def timing_pool(ref: Callable[[list[str]], list[list[int]]], sentences: list[str], target: int, batch: int) -> list[list[str]]:
    """Batches of `batch` distinct texts of about `target` tokens ([CLS]/[SEP] included), made of
    whole STS-B sentences, each sentence used once: as many batches as the sentences make."""
    lengths = [len(x) - 2 for x in ref(sentences)]
    texts: list[str] = []
    at = 0
    while at < len(sentences):
        parts, n = [sentences[at]], lengths[at]
        at += 1
        while n < target - 2 and at < len(sentences):
            parts.append(sentences[at])
            n += lengths[at]
            at += 1
        texts.append(" ".join(parts))
    tol = max(2, target // 16)
    texts = [t for t, ids in zip(texts, ref(texts), strict=True) if abs(len(ids) - target) <= tol]
    if len(texts) < batch:
        raise RuntimeError(f"only {len(texts)} texts of about {target} tokens")
    return [texts[i:i + batch] for i in range(0, len(texts) - batch + 1, batch)]


def cpu_per_input(run: Callable[[list[str]], object], batches: list[list[str]], seconds: float,
                  once: bool = False) -> float:
    """CPU µs per input (process_time: every thread), the batches in turn, over at least `seconds`
    of CPU (`once`: one pass over them)."""
    gc.collect()
    calls = inputs = 0
    t0 = time.process_time()
    while True:
        texts = batches[calls % len(batches)]
        run(texts)
        calls += 1
        inputs += len(texts)
        took = time.process_time() - t0
        if (once and calls == len(batches)) or (not once and took >= seconds and calls >= len(batches)):
            return took / inputs * 1e6


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--reps", type=int, default=5, help="repetitions; candidates take turns within each")
    ap.add_argument("--batch", type=int, default=32, help="inputs per batch call")
    ap.add_argument("--seconds", type=float, default=0.15, help="CPU seconds per sample (at least)")
    ap.add_argument("--lengths", type=str, default="20,128", help="target tokens per input")
    ap.add_argument("--only", type=strs, default=None, help="tokenizers,kitoken,tokie,flash-tokenizer")
    ap.add_argument("--no-timing", action="store_true", help="only the comparison")
    ap.add_argument("--no-compare", action="store_true", help="only the timing")
    a = ap.parse_args(argv)
    # one thread each, before any tokenizer starts its pool (rayon reads this once)
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    os.environ.setdefault("RAYON_NUM_THREADS", "1")

    from headwise.export import cpu as cpu_info
    from headwise.service.engine.tokenizer import TextTokenizer

    folder = model_dir()
    n = max_len(folder)
    reference = TextTokenizer(folder / "tokenizer.json", n)

    def ref_ids(texts: list[str]) -> list[list[int]]:
        return [e.ids.tolist() for e in reference.encode_unchecked(texts)]

    found, skipped = candidates(folder, n, a.only)
    print(f"# tokenizers_eval: {cpu_info.label()}, {os.cpu_count()} CPUs; python {sys.version.split()[0]}, "
          f"tokenizers {_version('tokenizers')}; {folder / 'tokenizer.json'}, max_len {n}")
    print(f"# TOKENIZERS_PARALLELISM={os.environ['TOKENIZERS_PARALLELISM']} "
          f"RAYON_NUM_THREADS={os.environ['RAYON_NUM_THREADS']}")
    for name, why in skipped.items():
        print(f"# skipped {name}: {why}")

    if not a.no_compare:
        sets = {name: make() for name, make in SETS.items()}
        print("\n## ids against TextTokenizer's (special tokens, truncation at max_len): mismatching inputs\n")
        print("| candidate | " + " | ".join(f"{k} ({len(v)})" for k, v in sets.items()) + " |")
        print("|---|" + "---:|" * len(sets))
        refs = {k: outcomes(ref_ids, v) for k, v in sets.items()}
        refused = {k: sum(o == ERROR for o in v) for k, v in refs.items()}
        notes = []
        for c in found:
            cells = []
            for k, texts in sets.items():
                bad, examples = mismatches(refs[k], outcomes(c.ids, texts), texts)
                cells.append(str(bad))
                notes += [f"- {c.name}, {k}: {x}" for x in examples]
            print(f"| {c.name} | " + " | ".join(cells) + " |")
        print("\ninputs the reference refuses (both refusing counts as a match): "
              + ", ".join(f"{k} {v}" for k, v in refused.items()))
        if notes:
            print("\nfirst mismatches (ids around the first difference):\n")
            print("\n".join(notes))

    if not a.no_timing:
        sentences = stsb()
        lengths = [int(x) for x in a.lengths.split(",")]
        pools = {t: timing_pool(ref_ids, sentences, t, a.batch) for t in lengths}
        first = {}
        if 128 in pools:  # before any candidate has seen them: caches cold (tokie's is per word)
            first = {c.name: cpu_per_input(c.run, pools[128], 0, once=True) for c in found}
        samples: dict[tuple[str, int], list[float]] = {(c.name, t): [] for c in found for t in lengths}
        for c in found:  # warm: one pass over every batch
            for t in lengths:
                cpu_per_input(c.run, pools[t], 0, once=True)
        for _, order in turns(found, a.reps, "rotate"):
            for t in lengths:
                for c in order:
                    samples[(c.name, t)].append(cpu_per_input(c.run, pools[t], a.seconds))
        real = {t: statistics.mean(len(x) for b in pools[t] for x in ref_ids(b)) for t in lengths}
        print(f"\n## CPU µs per input, batches of {a.batch}: median (min–max) of {a.reps} alternating repetitions\n")
        counts = ", ".join(f"{t} tokens: {len(pools[t]) * a.batch}" for t in lengths)
        print(f"Texts: whole STS-B sentences joined, distinct within a length ({counts}), each sample a pass "
              "or more over them.\n")
        cols = [f"{t} tokens (mean {real[t]:.1f})" for t in lengths] + (["128, first pass"] if first else [])
        print("| candidate | " + " | ".join(cols) + " |")
        print("|---|" + "---:|" * len(cols))
        base = {t: statistics.median(samples[(found[0].name, t)]) for t in lengths} if found else {}
        for c in found:
            cells = []
            for t in lengths:
                v = samples[(c.name, t)]
                med = statistics.median(v)
                cells.append(f"{med:.1f} ({min(v):.1f}–{max(v):.1f}) ×{base[t] / med:.2f}")
            if first:
                cells.append(f"{first[c.name]:.1f}")
            print(f"| {c.name} | " + " | ".join(cells) + " |")
        print(f"\n(×: speed-up over {found[0].name if found else '-'}, medians; first pass: one sample, "
              "each candidate's first sight of the 128-token texts)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
