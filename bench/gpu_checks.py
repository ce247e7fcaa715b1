"""What CUDA really runs, and how close it stays to fp32, on the GPU machine before the benchmark.

    python -m bench.gpu_checks PACKAGE [--out DIR] [--provider cuda|cpu]

Through the service's own `OrtBackend` (its CUDA probe, provider options and IOBinding):

- the CUDA probe's answer, the GPU and onnxruntime;
- placement: every node onnxruntime ran on the CPU instead, per variant (from its profile);
- parity over the STS-B dev sentences: each variant on CUDA against fp32 on the CPU (cosine
  mean/min, largest difference) and the STS-B Spearman × 100 each gives;
- batch invariance on CUDA: 32 sentences alone against inside one batch;
- IOBinding against `session.run` on the same session.

`--provider cpu` runs the same checks on the CPU (for `bench/gpu.sh --check`).
Writes DIR/gpu-checks.json and prints a markdown summary.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

from headwise.export.stsb import find_stsb, load_pairs, sts_score
from headwise.service.backends.onnxruntime import OrtBackend
from headwise.service.engine.tokenizer import TextTokenizer
from headwise.service.package import load_package
from headwise.service.settings import Settings

BATCH = 64


def feeds_for(tok: TextTokenizer, texts: list[str], pkg) -> dict[str, np.ndarray]:
    """Every input either graph reads: the analysis graph's head mask too (every head kept)."""
    encs = tok.encode_unchecked(texts)
    n = max(e.length for e in encs)
    ids = np.full((len(encs), n), pkg.pad_id, np.int64)
    mask = np.zeros((len(encs), n), np.int64)
    for i, e in enumerate(encs):
        ids[i, : e.length], mask[i, : e.length] = e.ids, 1
    return {"input_ids": ids, "attention_mask": mask, "token_type_ids": np.zeros_like(ids),
            "head_mask": np.ones((len(encs), pkg.n_layers, pkg.n_heads), np.float32)}


def embed(backend: OrtBackend, role: str, tok, pkg, texts: list[str]) -> np.ndarray:
    out = []
    for i in range(0, len(texts), BATCH):
        f = feeds_for(tok, texts[i : i + BATCH], pkg)
        out.append(backend.run(role, f, ["sentence_embedding"])["sentence_embedding"].astype(np.float32))
    return np.concatenate(out)


def cpu_nodes(path: Path, provider: str, options: dict, feeds: dict) -> list[str]:
    """Nodes of the graph that onnxruntime ran on the CPU (op type: count), read from a profile."""
    import onnxruntime as ort

    so = ort.SessionOptions()
    so.enable_profiling = True
    so.log_severity_level = 3
    so.profile_file_prefix = os.path.join(tempfile.mkdtemp(), "placement")
    providers = [("CUDAExecutionProvider", options), "CPUExecutionProvider"] if provider == "cuda" \
        else ["CPUExecutionProvider"]
    sess = ort.InferenceSession(str(path), so, providers=providers)
    sess.run(None, {k: feeds[k] for k in (i.name for i in sess.get_inputs())})
    trace = json.loads(Path(sess.end_profiling()).read_text())
    counts: dict[str, int] = {}
    for ev in trace:
        args = ev.get("args", {})
        if ev.get("cat") == "Node" and args.get("provider") == "CPUExecutionProvider" and ev["name"].endswith("_kernel_time"):
            op = args.get("op_name", "?")
            counts[op] = counts.get(op, 0) + 1
    return [f"{op}: {n}" for op, n in sorted(counts.items())]


def gpu_facts() -> dict:
    try:
        line = subprocess.run(["nvidia-smi", "--query-gpu=name,memory.total,driver_version", "--format=csv,noheader"],
                              capture_output=True, text=True, timeout=20).stdout.strip()
    except (OSError, subprocess.TimeoutExpired):
        line = ""
    return {"gpu": line or None}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m bench.gpu_checks", description=__doc__.splitlines()[0])
    p.add_argument("package")
    p.add_argument("--out", default=os.environ.get("OUT", "bench/results"))
    p.add_argument("--provider", choices=["cuda", "cpu"], default="cuda")
    p.add_argument("--sentences", type=int, default=0, help="use the first N STS-B pairs (0: all)")
    args = p.parse_args(argv)

    import onnxruntime as ort

    from headwise.service.backends import cuda

    pkg = load_package(args.package)
    tok = TextTokenizer(pkg.path / pkg.manifest["tokenizer"]["file"], pkg.max_len)
    facts = {"onnxruntime": ort.__version__, **gpu_facts()}
    if args.provider == "cuda":
        found = cuda.probe(0)
        facts["cuda_probe"] = {"ok": found.ok, "why": found.why(), "devices": found.devices,
                               "loaded_from_wheels": list(found.loaded)}
        print(f"CUDA probe: ok={found.ok} {found.why()} (loaded from wheels: {len(found.loaded)})", flush=True)
        if not found.ok:
            print("stopping: CUDA cannot be used", file=sys.stderr)
            return 2
    tmp = Path(tempfile.mkdtemp())
    a, b, gold = load_pairs(find_stsb())
    if args.sentences:
        a, b, gold = a[: args.sentences], b[: args.sentences], gold[: args.sentences]
    texts = a + b
    results: dict = {"facts": facts, "sentences": len(texts), "variants": {}}

    ref_backend = OrtBackend(pkg, Settings(models_dir=tmp, provider="cpu", precision="fp32"))
    t0 = time.perf_counter()
    ref = embed(ref_backend, "embed", tok, pkg, texts)
    print(f"fp32 on CPU: {len(texts)} sentences in {time.perf_counter() - t0:.1f} s", flush=True)
    results["cpu_fp32_sts"] = round(sts_score(ref[: len(a)], ref[len(a):], gold), 3)

    served = [("fp32", "embed"), ("fp16", "embed"), ("fp32", "attention")]
    for precision, role in served:
        if precision == "fp16" and "fast.fp16" not in pkg.variants:
            continue
        backend = OrtBackend(pkg, Settings(models_dir=tmp, provider=args.provider, precision=precision))
        name = backend.variants[role]
        sess = backend.session(role)
        t0 = time.perf_counter()
        got = embed(backend, role, tok, pkg, texts)
        took = time.perf_counter() - t0
        cos = (got * ref).sum(1) / (np.linalg.norm(got, axis=1) * np.linalg.norm(ref, axis=1))
        few = texts[:32]
        together = embed(backend, role, tok, pkg, few)
        alone = np.concatenate([embed(backend, role, tok, pkg, [t]) for t in few])
        f = feeds_for(tok, few, pkg)
        bound = backend.run(role, f, ["sentence_embedding"])["sentence_embedding"]
        plain = sess.run(["sentence_embedding"], {k: f[k] for k in backend.input_names(role)})[0]
        variant = pkg.variants[name]
        options = backend.cuda_options(variant.precision) if args.provider == "cuda" else {}
        row = {
            "variant": name, "provider": backend.provider, "session_providers": sess.get_providers(),
            "cuda_options": options, "seconds": round(took, 2),
            "cos_mean": float(cos.mean()), "cos_min": float(cos.min()),
            "max_abs_diff": float(np.abs(got - ref).max()),
            "sts": round(sts_score(got[: len(a)], got[len(a):], gold), 3),
            "batch_invariance": float(np.abs(together - alone).max()),
            "iobinding_vs_run": float(np.abs(bound.astype(np.float32) - plain.astype(np.float32)).max()),
            "cpu_nodes": cpu_nodes(variant.file, args.provider, options, f),
        }
        results["variants"][f"{name} ({role})"] = row
        print(f"{name:10} {role:9} on {backend.provider}: cos mean {row['cos_mean']:.6f} min {row['cos_min']:.6f} "
              f"max|d| {row['max_abs_diff']:.2e} STS {row['sts']} batch-inv {row['batch_invariance']:.1e} "
              f"iobind {row['iobinding_vs_run']:.1e} cpu nodes {row['cpu_nodes'] or 'none'} ({took:.1f} s)", flush=True)

    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    (out / "gpu-checks.json").write_text(json.dumps(results, indent=1))
    print("\n| variant | provider | cos mean | cos min | max abs diff | STS-B | batch invariance | IOBinding vs run | nodes on CPU |")
    print("|---|---|---|---|---|---|---|---|---|")
    for key, r in results["variants"].items():
        print(f"| {key} | {r['provider']} | {r['cos_mean']:.6f} | {r['cos_min']:.6f} | {r['max_abs_diff']:.1e} | "
              f"{r['sts']} | {r['batch_invariance']:.1e} | {r['iobinding_vs_run']:.1e} | "
              f"{', '.join(r['cpu_nodes']) or 'none'} |")
    print(f"\nCPU fp32 STS-B: {results['cpu_fp32_sts']}; {facts}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
