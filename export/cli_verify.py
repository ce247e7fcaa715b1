"""headwise verify models/NAME [--checkpoint DIR]"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("package", type=Path, help="model package folder, e.g. models/all-minilm-l6-v2")
    p.add_argument("--checkpoint", type=Path, help="checkpoint to compare with (default: the bundled one when it matches)")
    p.add_argument("--stsb", type=Path, help="STS Benchmark dev file")


def main(args: argparse.Namespace) -> int:
    from export.manifest import PackageError
    from export.verify import parity_table, verify

    try:
        parity = verify(args.package, args.checkpoint, args.stsb)
    except PackageError as e:
        print(f"headwise verify: FAILED: {e}", file=sys.stderr)
        return 1
    print(parity_table(parity))
    print(f"{args.package}: ok")
    return 0
