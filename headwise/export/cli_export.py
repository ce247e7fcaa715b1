"""headwise export [CHECKPOINT_DIR] --name NAME --out models/ [--int8] [--fp16]"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("checkpoint", nargs="?", type=Path,
                   help="Hugging Face checkpoint directory (default: bundled all-MiniLM-L6-v2)")
    p.add_argument("--name", help="package name (default: from the checkpoint)")
    p.add_argument("--out", type=Path, default=Path("models"), help="output folder (default: models/)")
    p.add_argument("--int8", action=argparse.BooleanOptionalAction, default=True, help="write fast.int8.onnx (CPU)")
    p.add_argument("--fp16", action=argparse.BooleanOptionalAction, default=True, help="write fast.fp16.onnx (GPU)")
    p.add_argument("--verify", action=argparse.BooleanOptionalAction, default=True, help="check parity (default: on)")
    p.add_argument("--quality", action=argparse.BooleanOptionalAction, default=True,
                   help="measure STS-B quality and CPU speed (default: on; off for untrained test models)")
    p.add_argument("--matryoshka-dimensions", type=parse_dimensions, default=(), metavar="N,N,...",
                   help="embedding sizes the model was trained to be cut to (MatryoshkaLoss), e.g. 768,512,256,128,64: "
                   "the only `dimensions` the service answers (default: none, and `dimensions` is refused)")
    p.add_argument("--stsb", type=Path, help="STS Benchmark dev file (default: $HEADWISE_STSB, else the bundled headwise/export/data/stsb/sts-dev.csv)")


def parse_dimensions(text: str) -> tuple[int, ...]:
    """`256,128,64` → (256, 128, 64); argparse's type for --matryoshka-dimensions."""
    try:
        dims = tuple(int(x) for x in text.split(",") if x.strip())
    except ValueError:
        raise ValueError(f"{text!r}: comma-separated whole numbers, e.g. 256,128,64") from None
    if not dims:
        raise ValueError("give at least one dimension, e.g. 256,128,64")
    return dims


def main(args: argparse.Namespace) -> int:
    from headwise.export.manifest import PackageError, read
    from headwise.export.package import build_package
    from headwise.export.verify import parity_table
    from headwise.model.importers import CheckpointError

    t0 = time.perf_counter()
    try:
        pkg = build_package(args.checkpoint, args.out, args.name, args.int8, args.fp16, args.verify, args.stsb,
                            quality=args.quality, matryoshka_dimensions=args.matryoshka_dimensions)
    except (PackageError, CheckpointError, FileNotFoundError, ValueError) as e:
        print(f"headwise export: error: {e}", file=sys.stderr)
        return 1
    parity = read(pkg)["parity"]
    if parity:
        print("\nparity vs torch (max abs diff; STS-B Spearman x100):\n" + parity_table(parity))
    print(f"\nwrote {pkg} in {time.perf_counter() - t0:.0f} s")
    return 0
