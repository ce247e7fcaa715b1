"""headwise export | verify | serve | bench (README: CLI)."""

from __future__ import annotations

import argparse
import importlib
import os
import sys
from pathlib import Path

# subcommand → module with `add_arguments(parser)` and `main(args) -> int`
COMMANDS = {
    "export": ("headwise.export.cli_export", "export a checkpoint to an ONNX model package"),
    "verify": ("headwise.export.cli_verify", "re-check a model package's hashes and parity"),
    "serve": ("headwise.service.server.serve", "serve model packages over HTTP"),
    "bench": ("bench.cli", "benchmark headwise against the onnxruntime ceiling and peers"),
}


def _bench():
    """The benchmarks are not part of the wheel: they run from a checkout, whose `bench/`
    sits beside this package (an editable install, or `python -m headwise.cli` in the clone)."""
    try:
        return importlib.import_module("bench.cli")
    except ModuleNotFoundError as e:
        if e.name not in ("bench", "bench.cli"):
            raise
    checkout = Path(__file__).resolve().parent.parent
    if not (checkout / "bench" / "cli.py").is_file():
        raise SystemExit("headwise bench: the benchmarks run from a git checkout of headwise "
                         "(bench/ is not installed with the package); clone it and pip install -e '.[bench]'")
    sys.path.insert(0, str(checkout))
    return importlib.import_module("bench.cli")


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    parser = argparse.ArgumentParser(prog="headwise", description=__doc__)
    sub = parser.add_subparsers(dest="command", required=True)
    for name, (_, help_) in COMMANDS.items():
        sub.add_parser(name, help=help_, add_help=False)
    if not argv or argv[0] in ("-h", "--help") or argv[0] not in COMMANDS:
        parser.parse_args(argv)  # prints help or the error and exits
        return 2
    if argv[0] == "serve":
        # Before numpy loads: the server's numpy work (pooling, attention rollout) is small and
        # runs on the inference thread; BLAS threads of its own would fight onnxruntime's
        # intra-op pool for the same cores (a 128-token rollout took about 3× longer with them).
        for var in ("OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
            os.environ.setdefault(var, "1")
    module = _bench() if argv[0] == "bench" else importlib.import_module(COMMANDS[argv[0]][0])
    p = argparse.ArgumentParser(prog=f"headwise {argv[0]}", description=COMMANDS[argv[0]][1])
    module.add_arguments(p)
    return int(module.main(p.parse_args(argv[1:])) or 0)


if __name__ == "__main__":
    sys.exit(main())
