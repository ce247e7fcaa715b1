"""headwise export | verify | serve | bench (README: CLI)."""

from __future__ import annotations

import argparse
import importlib
import os
import sys

# subcommand → module with `add_arguments(parser)` and `main(args) -> int`
COMMANDS = {
    "export": ("export.cli_export", "export a checkpoint to an ONNX model package"),
    "verify": ("export.cli_verify", "re-check a model package's hashes and parity"),
    "serve": ("service.cli", "serve model packages over HTTP"),
    "bench": ("bench.cli", "benchmark headwise against the onnxruntime ceiling and peers"),
}


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
    module = importlib.import_module(COMMANDS[argv[0]][0])
    p = argparse.ArgumentParser(prog=f"headwise {argv[0]}", description=COMMANDS[argv[0]][1])
    module.add_arguments(p)
    return int(module.main(p.parse_args(argv[1:])) or 0)


if __name__ == "__main__":
    sys.exit(main())
