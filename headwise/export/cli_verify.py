"""headwise verify models/NAME [--checkpoint DIR]"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("package", type=Path, help="model package folder, e.g. models/all-minilm-l6-v2")
    p.add_argument("--checkpoint", type=Path,
                   help="checkpoint to compare with (default: the bundled one when it matches; "
                        "required for decoder and encoder-decoder packages)")
    p.add_argument("--stsb", type=Path, help="STS Benchmark dev file (default: $HEADWISE_STSB, else the bundled one)")
    p.add_argument("--quality", action=argparse.BooleanOptionalAction, default=True,
                   help="measure the STS-B figures and their bars (default: on; off for untrained test models)")


def main(args: argparse.Namespace) -> int:
    from headwise.export import manifest as mf

    try:
        manifest = mf.read(args.package)
        architecture = manifest.get("architecture", "encoder")
        if manifest.get("task") == "classification":
            from headwise.export.classifier import parity_table, reverify

            if args.checkpoint is None:
                raise mf.PackageError("a classification package is verified against its checkpoint: pass --checkpoint DIR")
            parity = reverify(args.package, args.checkpoint)
        elif architecture == "encoder":
            from headwise.export.verify import parity_table, verify

            parity = verify(args.package, args.checkpoint, args.stsb, quality=args.quality)
        else:
            from headwise.export.generative_verify import parity_table, verify_generative

            if args.checkpoint is None:
                raise mf.PackageError(f"a {architecture} package is verified against its checkpoint: pass --checkpoint DIR")
            parity = verify_generative(args.package, args.checkpoint)
    except (mf.PackageError, FileNotFoundError) as e:
        print(f"headwise verify: FAILED: {e}", file=sys.stderr)
        return 1
    print(parity_table(parity))
    print(f"{args.package}: ok")
    return 0
