"""Host work per input: the CPU `headwise serve` spends per input besides onnxruntime, for two
or more trees A/B in one sitting (issue 27).

    python -m bench.host_work before=/tmp/hw-29dc194 after=. --reps 3 --seconds 5

A server is NAME=TREE[:KEY=VALUE,...] as in bench/ab.py. The tiny model (random BERT, d_model
32, 2 layers, 2 heads, d_ff 64, all-MiniLM-L6-v2's tokenizer and vocabulary) is built once.
Each repetition, in turn for every server (the order rotating): `headwise serve` from that tree
on CPU fp32, wrk at 16 clients with 1 input of 20 tokens per request, then 32 inputs of 128
tokens; the user + system CPU of the server's process tree (/proc) per input, its mean batch
and padded length (its /metrics); then, with the server stopped, onnxruntime's CPU per input in
this process for batches of that (rounded) size and padded length, with the service's own
session (headwise/service/backends/onnxruntime.py). Host work = server CPU − onnxruntime CPU, per input.
Prints every repetition and the medians; writes a markdown report (--out) and its raw JSON.
"""

from __future__ import annotations

import argparse
import json
import math
import shlex
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path

from bench.ab import parse_server
from bench.alternate import turns
from bench.facts import ROOT, load_average, machine_facts, tree_commit
from bench.http import load, measure, probe
from bench.noise import ForeignLoad
from bench.report import facts_table, write_json
from bench.server import start_headwise
from bench.stats import median
from bench.workload import Workload

NAME = "tiny-minilm"
PATH = "/v1/embed"
OUT = ROOT / "bench" / "results" / "host-work.md"
TINY = {"hidden_size": 32, "num_hidden_layers": 2, "num_attention_heads": 2, "intermediate_size": 64}
REFERENCE = ("Issue 27's reference (the 2-core AMD EPYC, before the change): about 187 µs of host work "
             "per 1-input 20-token request (216 µs of server CPU minus 28 µs in onnxruntime at batch "
             "16), and about 377 µs per input for 32-input requests of ~128 tokens (618 minus 241; "
             "the server cut them into batches of 8). Targets: ≥ 2× less host work at 1 × 20, ≥ 4× "
             "less at 32 × 128.")


@dataclass(frozen=True)
class Shape:
    label: str
    inputs: int  # per request
    tokens: int  # per input, [CLS]/[SEP] included
    target: float  # host work of the first server / of each other one, at least


SHAPES = (Shape("1×20", 1, 20, 2.0), Shape("32×128", 32, 128, 4.0))


# -- the tiny model --------------------------------------------------------------------------
def write_checkpoint(path: Path) -> None:
    """A random BertModel of TINY's size beside all-MiniLM-L6-v2's tokenizer, vocabulary and
    sentence-transformers files (run in a child: torch stays out of the measuring process)."""
    import torch
    from transformers import BertConfig, BertModel

    from headwise.model.sentence import default_checkpoint

    src = default_checkpoint()
    weights = {"config.json", "model.safetensors", "pytorch_model.bin", "README.md"}
    shutil.copytree(src, path, ignore=lambda d, names: weights & set(names) if Path(d) == src else ())
    base = json.loads((src / "config.json").read_text())
    torch.manual_seed(0)
    cfg = BertConfig(vocab_size=base["vocab_size"], max_position_embeddings=base["max_position_embeddings"],
                     attn_implementation="eager", **TINY)
    BertModel(cfg).eval().save_pretrained(str(path), safe_serialization=True)


def build_package(models: Path) -> Path:
    """The tiny package in `models` (reused when there), exported by `headwise export` (fp32)."""
    if (models / NAME / "manifest.json").is_file():
        return models / NAME
    ckpt = Path(tempfile.mkdtemp(prefix="host-work-ckpt-")) / NAME
    steps = ([sys.executable, "-m", "bench.host_work", "--checkpoint", str(ckpt)],
             [sys.executable, "-m", "headwise.cli", "export", str(ckpt), "--out", str(models), "--name", NAME,
              "--no-int8", "--no-fp16", "--no-quality"])
    for argv in steps:
        subprocess.run(argv, check=True, cwd=ROOT, stdout=subprocess.DEVNULL)
    shutil.rmtree(ckpt.parent, ignore_errors=True)
    return models / NAME


# -- onnxruntime in process ------------------------------------------------------------------
class OrtCost:
    """onnxruntime's CPU per input in this process: the service's own backend (its session
    options, fp32 fast graph, `threads` intra-op threads), timed by process CPU time."""

    def __init__(self, w: Workload, threads: int):
        from headwise.service.backends.onnxruntime import OrtBackend
        from headwise.service.package import load_package
        from headwise.service.settings import Settings

        self.w = w
        self.package = load_package(w.dir)
        settings = Settings(models_dir=w.dir.parent, provider="cpu", precision="fp32", threads=threads,
                            analytics_threads=0)
        self.backend = OrtBackend(self.package, settings)

    def feeds(self, tokens: int, batch: int, padded: int) -> dict:
        """A batch as the service feeds it: each input's ids right-padded to `padded`."""
        import numpy as np

        ids, types = self.w.ids(tokens)
        n = len(ids)
        padded = max(padded, n)
        feeds = {"input_ids": np.full((batch, padded), self.package.pad_id, np.int64),
                 "attention_mask": np.zeros((batch, padded), np.int64),
                 "token_type_ids": np.zeros((batch, padded), np.int64)}
        feeds["input_ids"][:, :n], feeds["attention_mask"][:, :n], feeds["token_type_ids"][:, :n] = ids, 1, types
        return feeds

    def cpu_us_per_input(self, tokens: int, batch: int, padded: int, seconds: float) -> float:
        """Process CPU (every thread) per input over back-to-back runs of one batch shape."""
        feeds = self.feeds(tokens, batch, padded)
        names = self.backend.input_names("embed")
        feeds = {k: feeds[k] for k in names}
        self.backend.run("embed", feeds, ["sentence_embedding"])  # warm
        calls, cpu0, t0 = 0, time.process_time(), time.perf_counter()
        while calls < 5 or time.perf_counter() - t0 < seconds:
            self.backend.run("embed", feeds, ["sentence_embedding"])
            calls += 1
        return (time.process_time() - cpu0) / (calls * batch) * 1e6


# -- one repetition --------------------------------------------------------------------------
def serve_and_load(name: str, tree: Path, env: dict, w: Workload, bodies: dict, a, log_dir: Path) -> dict:
    """`headwise serve` from `tree`, each shape loaded in turn; → {shape label: Sample}."""
    server = start_headwise(w.dir, "fp32", "cpu", log_dir, env, tree=tree, name=f"host-work-{name}")
    got = {}
    try:
        server.wait_ready()
        for shape in SHAPES:
            body = bodies[shape.label]
            probe(server.url + PATH, body, False)
            load(server.url + PATH, body, a.clients, 1)  # warm
            with ForeignLoad([server.proc.pid]) as others:
                got[shape.label] = measure(server, PATH, body, a.clients, a.seconds,
                                           inputs_per_request=shape.inputs)
            got[shape.label].extra["foreign_cores"] = others.cores
    finally:
        server.stop()
    return got


def record(rep: int, name: str, shape: Shape, sample, ort: OrtCost, ort_seconds: float) -> dict:
    """One repetition's figures for one server and shape, onnxruntime measured at the batches
    the server formed."""
    x = sample.extra
    batch = max(1, round(x.get("mean_batch", shape.inputs)))
    padded = round(x.get("padded", shape.tokens))
    ort_us = ort.cpu_us_per_input(shape.tokens, batch, padded, ort_seconds)
    server_us = x.get("server_cpu_us_per_input", math.nan)
    return {"rep": rep, "server": name, "shape": shape.label, "server_cpu_us": server_us,
            "ort_cpu_us": ort_us, "host_us": server_us - ort_us, "mean_batch": x.get("mean_batch", math.nan),
            "padded": x.get("padded", math.nan), "ort_batch": batch, "ort_padded": padded,
            "inputs_per_s": sample.throughput, "p50_ms": sample.p50, "errors": sample.errors,
            "others_cores": x.get("foreign_cores", math.nan)}


def show(r: dict) -> str:
    """One record as a line of the progress log."""
    return (f"rep {r['rep']} {r['server']:10s} {r['shape']:7s} server {r['server_cpu_us']:7.1f}  "
            f"ORT {r['ort_cpu_us']:7.1f} (b{r['ort_batch']} × {r['ort_padded']})  host {r['host_us']:7.1f} "
            f"µs/input  batch {r['mean_batch']:.1f}  {r['inputs_per_s']:7.0f} inputs/s  "
            f"p50 {r['p50_ms']:.2f} ms  errors {r['errors']}  others {r['others_cores']:.2f} cores")


# -- medians, ratios, the report ---------------------------------------------------------------
def medians(records: list[dict], server: str, shape: str) -> dict:
    mine = [r for r in records if r["server"] == server and r["shape"] == shape]
    keys = ("server_cpu_us", "ort_cpu_us", "host_us", "mean_batch", "padded", "inputs_per_s", "p50_ms",
            "others_cores")
    return {k: median(r[k] for r in mine) for k in keys} | {"reps": len(mine)}


def paired_ratio(records: list[dict], first: str, other: str, shape: str) -> float:
    """Median over repetitions of the first server's host work / the other's, same repetition."""
    by = {(r["rep"], r["server"]): r["host_us"] for r in records if r["shape"] == shape}
    ratios = [by[rep, first] / by[rep, other] if by[rep, other] > 0 else math.inf
              for rep, name in by if name == first and (rep, other) in by]
    return median(ratios)


def summary_lines(records: list[dict], names: list[str]) -> list[str]:
    """The medians per server and shape, and each server's ratio to the first."""
    lines = ["| server | shape | server CPU µs/input | ORT CPU µs/input | host work µs/input | mean batch "
             "| padded | inputs/s | p50 ms | others' cores | reps |", "|" + "---|" * 11]
    for shape in SHAPES:
        for name in names:
            m = medians(records, name, shape.label)
            lines.append(f"| {name} | {shape.label} | {m['server_cpu_us']:.1f} | {m['ort_cpu_us']:.1f} "
                         f"| {m['host_us']:.1f} | {m['mean_batch']:.1f} | {m['padded']:.0f} "
                         f"| {m['inputs_per_s']:,.0f} | {m['p50_ms']:.2f} | {m['others_cores']:.2f} | {m['reps']} |")
    lines += ["", f"| shape | host work {names[0]} / other | other | paired ratio (median) "
              "| ratio of medians | target | met |", "|---|---|---|---|---|---|---|"]
    for shape in SHAPES:
        first = medians(records, names[0], shape.label)["host_us"]
        for name in names[1:]:
            ratio = paired_ratio(records, names[0], name, shape.label)
            other = medians(records, name, shape.label)["host_us"]
            lines.append(f"| {shape.label} | {first:.1f} µs | {name}: {other:.1f} µs | {ratio:.2f}× "
                         f"| {first / other if other > 0 else math.inf:.2f}× | ≥ {shape.target:g}× "
                         f"| {'yes' if ratio >= shape.target else 'no'} |")
    return lines


def report(command: str, facts: dict, servers: list, records: list[dict], a) -> str:
    names = [n for n, _, _ in servers]
    tree_rows = [f"| {n} | `{t}` | {tree_commit(root=t)} | {', '.join(f'{k}={v}' for k, v in env.items()) or '–'} |"
                 for n, t, env in servers]
    reps = ["| rep | server | shape | server CPU | ORT CPU (batch × padded) | host work | mean batch "
            "| inputs/s | p50 ms | errors | others' cores |", "|" + "---|" * 11]
    reps += [f"| {r['rep']} | {r['server']} | {r['shape']} | {r['server_cpu_us']:.1f} | {r['ort_cpu_us']:.1f} "
             f"({r['ort_batch']} × {r['ort_padded']}) | {r['host_us']:.1f} | {r['mean_batch']:.1f} "
             f"| {r['inputs_per_s']:,.0f} | {r['p50_ms']:.2f} | {r['errors']} | {r['others_cores']:.2f} |"
             for r in records]
    method = (f"Every figure is per input, in µs. `server CPU` = user + system CPU of the server's whole "
              f"process tree (/proc) while wrk loaded it ({a.clients} clients, {a.seconds:g} s, after 1 s of "
              "warm-up), over the inputs completed. `ORT CPU` = this process's CPU time over back-to-back "
              f"runs of the package's fp32 fast graph with this checkout's service session ({a.threads} intra-op "
              "threads, headwise/service/backends/onnxruntime.py), at the server's mean batch (rounded) and mean "
              "padded length (headwise_batch_size, headwise_batch_tokens), the server stopped. `host work` = "
              f"server CPU − ORT CPU. Medians of {a.reps} repetitions; servers alternate, the order rotating "
              "each repetition. Shapes: inputs per request × tokens per input ([CLS]/[SEP] included; the "
              "32 texts of a request differ).")
    return "\n".join([
        "# Host work per input: `headwise serve`, tiny model, A/B\n", f"Command: `{command}`\n",
        "## Machine\n", facts_table(facts), "## Servers\n", "| server | tree | commit | environment |",
        "|---|---|---|---|", *tree_rows, "", "## Method\n", method, "", "## Medians\n",
        *summary_lines(records, names), "", "## Repetitions\n", *reps, "", "## Notes\n", f"- {REFERENCE}",
        "- Host work is everything the server's processes do besides onnxruntime's own compute: HTTP, "
        "JSON, tokenising, batching, padding, pooling, answers, and threads waking.", ""])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("servers", nargs="*", help="NAME=TREE[:KEY=VALUE,...]; the first is the reference")
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--seconds", type=float, default=5, help="seconds of load per shape and repetition")
    ap.add_argument("--clients", type=int, default=16)
    ap.add_argument("--threads", type=int, default=2, help="intra-op threads of the in-process onnxruntime")
    ap.add_argument("--ort-seconds", type=float, default=1.5, help="seconds per in-process onnxruntime figure")
    ap.add_argument("--models", type=Path, help="where the tiny package is built (reused when there); "
                    "default: a new temporary folder")
    ap.add_argument("--out", type=Path, default=OUT, help=f"the markdown report (default {OUT.relative_to(ROOT)})")
    ap.add_argument("--checkpoint", type=Path, help=argparse.SUPPRESS)
    a = ap.parse_args()
    if a.checkpoint:
        write_checkpoint(a.checkpoint)
        return
    if not a.servers:
        ap.error("name at least one server, NAME=TREE")
    command = "python -m bench.host_work " + shlex.join(sys.argv[1:])
    servers = [parse_server(s) for s in a.servers]
    facts = machine_facts("cpu")
    facts["load average at start (1/5/15 min)"] = load_average()
    print(f"host work on {facts['cpu']}; building the tiny package", flush=True)
    w = Workload(build_package(a.models or Path(tempfile.mkdtemp(prefix="host-work-models-"))))
    bodies = {s.label: w.body(s.tokens, inputs=s.inputs) for s in SHAPES}
    ort = OrtCost(w, a.threads)
    log_dir = Path(tempfile.mkdtemp(prefix="host-work-logs-"))
    records: list[dict] = []
    for rep, now in turns(servers, a.reps, "rotate"):
        for name, tree, env in now:
            samples = serve_and_load(name, tree, env, w, bodies, a, log_dir)
            for shape in SHAPES:
                records.append(record(rep, name, shape, samples[shape.label], ort, a.ort_seconds))
                print(show(records[-1]), flush=True)
    facts["load average at end (1/5/15 min)"] = load_average()
    facts["date (UTC)"] = datetime.now(timezone.utc).strftime("%Y-%m-%d %H:%M")
    facts["model package"] = (f"{w.name}: random BERT, d_model {w.manifest['d_model']}, {w.n_layers} layers, "
                              f"{w.n_heads} heads, d_ff {TINY['intermediate_size']}; all-MiniLM-L6-v2's "
                              f"tokenizer and vocabulary; max_len {w.max_len}; fp32 fast graph on CPU")
    print("\n".join(summary_lines(records, [n for n, _, _ in servers])))
    a.out.parent.mkdir(parents=True, exist_ok=True)
    a.out.write_text(report(command, facts, servers, records, a))
    write_json(a.out.with_suffix(".raw.json"), {"command": command, "facts": facts, "records": records})
    print(f"wrote {a.out}")


if __name__ == "__main__":
    main()
