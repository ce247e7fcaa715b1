"""headwise verify models/NAME [--checkpoint DIR]"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("package", type=Path, help="model package folder, e.g. models/all-minilm-l6-v2")
    p.add_argument("--checkpoint", type=Path,
                   help="checkpoint to compare with (default: the bundled one when the package was "
                        "exported from it; required for every other)")
    p.add_argument("--stsb", type=Path, help="STS Benchmark dev file (default: $HEADWISE_STSB, else the bundled one)")
    p.add_argument("--quality", action=argparse.BooleanOptionalAction, default=True,
                   help="measure the STS-B figures and their bars (default: on; off for untrained test models)")


def main(args: argparse.Namespace) -> int:
    from headwise.export.manifest import PackageError
    from headwise.export.package import verify_package
    from headwise.export.verify import parity_table

    try:
        parity = verify_package(args.package, args.checkpoint, args.stsb, quality=args.quality)
    except (PackageError, FileNotFoundError) as e:
        print(f"headwise verify: FAILED: {e}", file=sys.stderr)
        return 1
    print(parity_table(parity))
    print(f"{args.package}: ok")
    return 0
