"""What an attention answer costs over a plain one, in process (no HTTP): the model run and the
payload (select, cast, encode, serialise) of one input, for each dtype/encoding, with the
package's float16 output (`attentions_f16`) and without it (numpy's cast).

    python -m bench.experiments.attention_cost PACKAGE [--tokens 128] [--reps 30]

Prints a markdown table of medians, with the CPU it ran on.
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time

import numpy as np
import orjson

from headwise.export import cpu as cpu_info
from headwise.service.backends.onnxruntime import OrtBackend
from headwise.service.engine.outputs import attention_payload
from headwise.service.engine.params import AttentionSpec
from headwise.service.package import load_package
from headwise.service.settings import Settings


def median_ms(fn, reps: int) -> float:
    fn()
    times = []
    for _ in range(reps):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return 1000 * statistics.median(times)


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(prog="python -m bench.experiments.attention_cost")
    p.add_argument("package")
    p.add_argument("--tokens", type=int, default=128)
    p.add_argument("--reps", type=int, default=30)
    p.add_argument("--provider", default="cpu", choices=["cpu", "cuda"])
    args = p.parse_args(argv)
    pkg = load_package(args.package)
    b = OrtBackend(pkg, Settings(models_dir=tempfile.mkdtemp(), provider=args.provider))
    t = args.tokens
    feeds = {"input_ids": np.full((1, t), 1000, np.int64), "attention_mask": np.ones((1, t), np.int64),
             "token_type_ids": np.zeros((1, t), np.int64)}
    has_f16 = "attentions_f16" in pkg.variants["attention"].outputs
    everything = tuple(range(pkg.n_layers)), tuple(range(pkg.n_heads))
    rows = [("plain request: fast graph", median_ms(lambda: b.run("embed", feeds, ["sentence_embedding"]), args.reps))]
    rows.append(("attention graph, float32 weights",
                 median_ms(lambda: b.run("attention", feeds, ["sentence_embedding", "attentions"]), args.reps)))
    if has_f16:
        rows.append(("attention graph, float16 weights (attentions_f16)",
                     median_ms(lambda: b.run("attention", feeds, ["sentence_embedding", "attentions_f16"]), args.reps)))
    att32 = b.run("attention", feeds, ["attentions"])["attentions"][0]
    att16 = b.run("attention", feeds, ["attentions_f16"])["attentions_f16"][0] if has_f16 else None
    for dtype, encoding in (("float16", "base64"), ("float32", "base64"), ("float16", "json"), ("float32", "json")):
        spec = AttentionSpec(*everything, all_layers=True, all_heads=True, format="dense", top_k=1,
                             dtype=dtype, encoding=encoding)
        for source, att in (("numpy cast", att32), ("graph float16", att16)):
            if att is None or (dtype == "float32" and source == "graph float16"):
                continue
            if dtype == "float32":
                source = "float32"
            rows.append((f"payload {dtype} {encoding} from {source}",
                         median_ms(lambda att=att, spec=spec: orjson.dumps(attention_payload(att, t, spec),
                                                                          option=orjson.OPT_SERIALIZE_NUMPY), args.reps)))
    print(f"# attention cost, {pkg.name}, {t} tokens, one input, {args.provider} ({cpu_info.label()})\n")
    print("| step | median ms |\n|---|---|")
    for name, ms in rows:
        print(f"| {name} | {ms:.2f} |")


if __name__ == "__main__":
    main()
