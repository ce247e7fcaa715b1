"""`headwise bench`: the ceiling, headwise over HTTP and the peers, in one run on one machine.

Repetitions alternate between systems (for each repetition, for each input length, every
system in turn, the order rotating) so that drift on a shared machine hits all alike; the
report gives medians. Writes bench/results/<name>.md, <name>.png and <name>.raw.json.
"""

from __future__ import annotations

import argparse
import math
import shlex
import sys
import tempfile
import time
from dataclasses import dataclass
from datetime import datetime, timezone
from functools import partial
from pathlib import Path

from bench.alternate import turn
from bench.args import ints, key_values, strs
from bench.cells import Row, Sample
from bench.facts import load_average, machine_facts
from bench.noise import ForeignLoad, wait_for_calm
from bench.report import VARIANT_ORDER, rerender, write_json, write_report

RESULTS = Path(__file__).resolve().parent / "results"
SUITES = ("ceiling", "http", "st", "naive")
DEFAULTS = {  # the full run: about 15-20 minutes on 2 cores
    "lengths": [16, 20, 128, 512], "concurrency": [1, 16, 64], "batches": [1, 8, 16, 32],
    "st_batches": [1, 8, 32], "reps": 3, "seconds": 3.0, "ceiling_seconds": 1.0,
}
QUICK = {  # about 3 minutes: what issue 4 and 9's targets need
    "lengths": [20, 128], "concurrency": [1, 16], "batches": [1, 16], "st_batches": [32],
    "reps": 3, "seconds": 2.0, "ceiling_seconds": 0.6,
}
MAX_CELL_SECONDS = 20.0
STANDARD_NOTES = [
    "HTTP cells run `--seconds` (longer, up to 20 s, when fewer than 3 answers per client came "
    "back); requests still in flight when wrk stops are not counted, which understates "
    "throughput by about 1 / (2 × answers per client): negligible at 16 clients and 20 tokens, "
    "a few percent for the slowest 64-client cells.",
]


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--models", default="models", metavar="DIR",
                   help="model package (or a folder with one); build it with `headwise export --out DIR`")
    p.add_argument("--suites", type=strs, default=list(SUITES),
                   help=f"comma list of {', '.join(SUITES)} (default: all)")
    p.add_argument("--variants", type=strs, default=None,
                   help="fp32,int8,attention on CPU (default); fp16,attention on CUDA")
    p.add_argument("--lengths", type=ints, help="tokens per input, specials included (default 16,20,128,512)")
    p.add_argument("--concurrency", type=ints, help="HTTP clients (default 1,16,64)")
    p.add_argument("--batches", type=ints, help="ceiling batch sizes (default 1,8,16,32)")
    p.add_argument("--st-batches", type=ints, help="sentence-transformers batch sizes (default 1,8,32)")
    p.add_argument("--reps", type=int, help="repetitions per cell, ≥ 3 for medians (default 3)")
    p.add_argument("--seconds", type=float, help="seconds per HTTP cell and repetition (default 3)")
    p.add_argument("--ceiling-seconds", type=float, help="seconds per in-process cell and repetition (default 1)")
    p.add_argument("--quick", action="store_true",
                   help="about 3 minutes: lengths 20,128; clients 1,16; ceiling batch 1,16; "
                        "sentence-transformers batch 32; 2 s cells")
    p.add_argument("--provider", choices=["cpu", "cuda"], default="cpu")
    p.add_argument("--threads", type=int, help="in-process intra-op threads (default: usable cores)")
    p.add_argument("--url", help="benchmark this running headwise (base URL) instead of starting servers")
    p.add_argument("--server-env", action="append", default=[], metavar="KEY=VALUE",
                   help="extra environment for the headwise servers started (e.g. HEADWISE_MAX_WAIT_MS=1)")
    p.add_argument("--st-model", help="sentence-transformers model dir (default: the bundled all-MiniLM-L6-v2)")
    p.add_argument("--name", help="results file stem (default: <provider>[-quick])")
    p.add_argument("--out", type=Path, default=RESULTS, help="results folder (default bench/results)")
    p.add_argument("--calm", type=float, default=0.0, metavar="SECONDS",
                   help="before each cell, wait up to this long for other processes to use < 0.25 "
                        "cores (a shared machine); default 0: do not wait")
    p.add_argument("--disturbed-cores", default="0.5", metavar="CORES",
                   help="a repetition during which other processes used more CPU than this is left "
                        "out of the medians when two undisturbed ones remain ('none': keep all)")
    p.add_argument("--retry-disturbed", type=int, default=0, metavar="N",
                   help="measure a disturbed cell again, up to N times (after --calm); default 0")
    p.add_argument("--from-raw", type=Path, metavar="RAW_JSON",
                   help="measure nothing: write the report again from a <name>.raw.json")
    p.add_argument("--max-minutes", type=float, default=40.0,
                   help="stop after the repetition that passes this (default 40)")


def plan(args: argparse.Namespace) -> dict:
    base = dict(QUICK if args.quick else DEFAULTS)
    for k in base:
        v = getattr(args, k, None)
        if v is not None:
            base[k] = v
    base["reps"] = max(1, base["reps"])
    if args.variants:
        base["variants"] = args.variants
    else:
        base["variants"] = ["fp16", "attention"] if args.provider == "cuda" else ["fp32", "int8", "attention"]
    bad = set(args.suites) - set(SUITES)
    if bad:
        raise SystemExit(f"headwise bench: unknown suite(s) {', '.join(sorted(bad))}; pick from {', '.join(SUITES)}")
    bad = set(base["variants"]) - {"fp32", "int8", "fp16", "attention"}
    if bad:
        raise SystemExit(f"headwise bench: unknown variant(s) {', '.join(sorted(bad))}")
    return base


@dataclass
class Cell:
    row: Row
    measure: callable  # () -> Sample


class Run:
    """Holds the rows and the systems; runs the cells of one system at one input length."""

    def __init__(self, args: argparse.Namespace, cfg: dict):
        from bench.workload import Workload

        self.args, self.cfg = args, cfg
        self.w = Workload(args.models)
        self.rows: dict[tuple, Row] = {}
        self.notes: list[str] = []
        self.servers: dict = {}
        self.durations: dict[tuple, float] = {}
        self.probed: set = set()
        self.log_dir = Path(tempfile.mkdtemp(prefix="headwise-bench-logs-"))
        self.ceiling = None
        self.st = None

    # -- rows ----------------------------------------------------------------------------
    def add(self, row: Row, sample: Sample) -> None:
        self.rows.setdefault(row.key, row).samples.append(sample)
        extra = f"  batch≈{sample.extra['mean_batch']:.1f}" if "mean_batch" in sample.extra else ""
        extra += f"  ORT busy {sample.extra['ort_busy']:.0%}" if "ort_busy" in sample.extra else ""
        cpu = sample.extra.get("server_cpu_us_per_input", math.nan)
        extra += f"  server CPU {cpu:.0f} µs/input" if not math.isnan(cpu) else ""
        extra += f"  others {sample.extra.get('foreign_cores', math.nan):.2f} cores"
        where = f"b{row.batch}" if row.batch is not None else f"c{row.concurrency}"
        print(f"  {row.suite:22} {row.variant:9} {row.tokens:4} tok {where:4}: "
              f"{sample.throughput:9.1f} /s  p50 {sample.p50:8.2f}  p99 {sample.p99:8.2f} ms"
              f"  errors {sample.errors}{extra}", flush=True)

    # -- set-up --------------------------------------------------------------------------
    def http_variants(self) -> list[str]:
        return [v for v in self.cfg["variants"] if self.w.has(v)]

    def serving_precision(self, variant: str) -> str:
        """The server that answers a variant: attention requests go to the fp32/fp16 server."""
        if variant != "attention":
            return variant
        have = [v for v in self.cfg["variants"] if v != "attention"]
        for p in ("fp32", "fp16", "int8"):
            if p in have:
                return p
        return "fp16" if self.args.provider == "cuda" else "fp32"

    def start_servers(self) -> None:
        from bench.peers import start_naive
        from bench.server import Server, start_headwise

        self.log_dir.mkdir(parents=True, exist_ok=True)
        suites = self.args.suites
        if "http" in suites:
            if self.args.url:
                self.servers["external"] = _External(self.args.url)
            else:
                extra = key_values(self.args.server_env)
                for p in sorted({self.serving_precision(v) for v in self.http_variants()}):
                    self.servers[p] = start_headwise(self.w.dir, p, self.args.provider, self.log_dir, extra)
        if "naive" in suites:
            device = "cuda" if self.args.provider == "cuda" else "cpu"
            self.servers["naive"] = start_naive(self.log_dir, self.args.st_model, device, self.args.threads)
        for name, s in self.servers.items():
            if isinstance(s, Server):
                s.wait_ready()
                print(f"  {name} server ready on {s.url}", flush=True)

    def stop_servers(self) -> None:
        from bench.server import Server

        for s in self.servers.values():
            if isinstance(s, Server):
                s.stop()

    # -- the systems: each gives its cells at one input length --------------------------------
    def systems(self) -> list[tuple[str, callable]]:
        out = []
        s = self.args.suites
        if "ceiling" in s:
            out.append(("ceiling", self.ceiling_cells))
        if "http" in s:
            out.append(("headwise", self.headwise_cells))
        if "st" in s:
            out.append(("sentence-transformers", self.st_cells))
        if "naive" in s:
            out.append(("naive-server", self.naive_cells))
        return out

    def ceiling_cells(self, tokens: int) -> list[Cell]:
        from bench.ceiling import Ceiling

        if self.ceiling is None:
            self.ceiling = Ceiling(self.w, self.args.provider, self.args.threads)
        budget = 64 << 20  # the server's default HEADWISE_ATTENTION_BUDGET_BYTES
        cells = []
        for variant in self.cfg["variants"]:
            if not self.w.has(variant):
                self._note(f"the package has no {variant} variant: its cells are skipped")
                continue
            for batch in self.cfg["batches"]:
                if variant == "attention" and self.w.attention_bytes(tokens, batch) > budget:
                    self._note(f"ceiling attention at {tokens} tokens, batch {batch} skipped: "
                               f"{self.w.attention_bytes(tokens, batch) >> 20} MiB of attention is over "
                               "the server's 64 MiB per-batch budget (the server never runs it)")
                    continue
                row = self.ceiling.row(variant, tokens, batch)
                cells.append(Cell(row, partial(self.ceiling.measure, variant, tokens, batch,
                                               self.cfg["ceiling_seconds"])))
        return cells

    def headwise_cells(self, tokens: int) -> list[Cell]:
        from bench.http import headwise_row

        cells = []
        for variant in self.http_variants():
            server = self.servers.get("external") or self.servers[self.serving_precision(variant)]
            label = variant
            if "external" in self.servers and variant != "attention":
                label = self.servers["external"].precision
                if label != variant:
                    continue  # an external server serves one precision
            body = self.w.body(tokens, attention=variant == "attention")
            for clients in self.cfg["concurrency"]:
                row = headwise_row(self.w, label, tokens, clients)
                cells.append(Cell(row, partial(self._http_cell, server, "/v1/embed", body, clients,
                                               row.key, variant == "attention")))
        return cells

    def st_cells(self, tokens: int) -> list[Cell]:
        from bench.peers import SentenceTransformersPeer

        if self.st is None:
            device = "cuda" if self.args.provider == "cuda" else "cpu"
            self.st = SentenceTransformersPeer(self.w, self.args.st_model, device, self.args.threads)
        return [Cell(self.st.row(tokens, b), partial(self.st.measure, tokens, b, self.cfg["ceiling_seconds"]))
                for b in self.cfg["st_batches"]]

    def naive_cells(self, tokens: int) -> list[Cell]:
        from bench.peers import naive_row

        body = self.w.body(tokens)
        cells = []
        for clients in self.cfg["concurrency"]:
            row = naive_row(self.w, tokens, clients)
            cells.append(Cell(row, partial(self._http_cell, self.servers["naive"], "/v1/embed", body,
                                           clients, row.key, False)))
        return cells

    def run_length(self, tokens: int, rotation: int) -> None:
        """Every system's cells at this length, paired ones back to back: ceiling batch n next to
        headwise at n clients, so that drift between them is small; the system order rotates."""
        systems = self.systems()
        order = {name: i for i, (name, _) in enumerate(turn(systems, rotation, "rotate"))}
        cells = [c for _, make in systems for c in make(tokens)]
        cells.sort(key=lambda c: (c.row.batch or c.row.concurrency or 0,
                                  VARIANT_ORDER.get(c.row.variant, 9), order[c.row.suite]))
        pids = [s.proc.pid for s in self.servers.values() if hasattr(s, "proc")]
        from bench.cells import quiet

        for c in cells:
            for attempt in range(1 + self.args.retry_disturbed):  # bounded
                waited = wait_for_calm(pids, self.args.calm)
                t0 = time.perf_counter()
                with ForeignLoad(pids) as load:
                    sample = c.measure()
                sample.extra["cell_s"] = time.perf_counter() - t0
                # an external server's CPU cannot be told from other people's: unknown then
                sample.extra["foreign_cores"] = math.nan if "external" in self.servers else load.cores
                sample.extra["attempt"] = attempt
                if self.args.calm > 0:
                    sample.extra["waited_s"] = waited
                if quiet(sample) or attempt == self.args.retry_disturbed:
                    break
                print(f"  (others used {load.cores:.2f} cores: measuring again)", flush=True)
            self.add(c.row, sample)

    def _http_cell(self, server, path: str, body: bytes, clients: int, key: tuple,
                   attention: bool) -> Sample:
        """One repetition; the first one of a cell grows its duration until ≥ 3 answers per client."""
        from bench.http import measure, probe

        if (server.url, body) not in self.probed:
            probe(server.url + path, body, attention)
            self.probed.add((server.url, body))
        seconds = self.durations.get(key, self.cfg["seconds"])
        for _ in range(3):  # bounded: at most two longer retries
            sample = measure(server, path, body, clients, seconds)
            enough = sample.requests >= 3 * clients
            if enough or seconds >= MAX_CELL_SECONDS or key in self.durations:
                break
            want = seconds * math.ceil(3 * clients / max(1, sample.requests))
            seconds = min(MAX_CELL_SECONDS, max(want, seconds * 2))
            print(f"  ({sample.requests} answers for {clients} clients: again for {seconds:.0f} s)", flush=True)
        self.durations[key] = seconds
        return sample

    def _note(self, text: str) -> None:
        if text not in self.notes:
            self.notes.append(text)


class _External:
    """A headwise the user started; its precision is read from /v1/models."""

    def __init__(self, url: str):
        import json

        from bench.server import http

        self.url = url.rstrip("/")
        status, body = http("GET", self.url + "/v1/models", timeout=10)
        if status != 200:
            raise SystemExit(f"headwise bench: {self.url}/v1/models answered {status or 'nothing'}")
        data = json.loads(body).get("data") or [{}]
        self.precision = data[0].get("precision") or "fp32"

    def metrics_text(self) -> str:
        from bench.server import http

        status, body = http("GET", self.url + "/metrics", timeout=10)
        return body.decode(errors="replace") if status == 200 else ""


def main(args: argparse.Namespace) -> int:
    from bench import cells

    cells.DISTURBED_CORES = None if args.disturbed_cores == "none" else float(args.disturbed_cores)
    if args.from_raw:
        return rerender(args)
    cfg = plan(args)
    name = args.name or (args.provider + ("-quick" if args.quick else ""))
    args.out.mkdir(parents=True, exist_ok=True)
    command = "headwise bench " + shlex.join(sys.argv[2:] if sys.argv[1:2] == ["bench"] else sys.argv[1:])
    try:
        run = Run(args, cfg)
    except (FileNotFoundError, ValueError) as e:
        print(f"headwise bench: error: {e}", file=sys.stderr)
        return 2
    facts = machine_facts(args.provider)
    facts["model package"] = f"{run.w.name} ({run.w.dir}), max_len {run.w.max_len}"
    facts["load average at start (1/5/15 min)"] = load_average()
    started = time.monotonic()
    print(f"headwise bench: {name} on {facts['cpu']}", flush=True)
    print(f"headwise bench: {name}: suites {', '.join(args.suites)}; variants {', '.join(cfg['variants'])}; "
          f"lengths {cfg['lengths']}; clients {cfg['concurrency']}; batches {cfg['batches']}; "
          f"{cfg['reps']} reps", flush=True)
    try:
        run.start_servers()
        for rep in range(cfg["reps"]):
            print(f"repetition {rep + 1}/{cfg['reps']}", flush=True)
            for i, tokens in enumerate(cfg["lengths"]):
                run.run_length(tokens, rep + i)
            write_json(args.out / f"{name}.raw.json", [r.to_json() for r in run.rows.values()])
            if (time.monotonic() - started) / 60 > args.max_minutes and rep + 1 < cfg["reps"]:
                run.notes.append(f"stopped after {rep + 1} repetitions: over --max-minutes {args.max_minutes}")
                break
    finally:
        run.stop_servers()
    rows = list(run.rows.values())
    facts["load average at end (1/5/15 min)"] = load_average()
    loads = sorted(s.extra["foreign_cores"] for r in rows for s in r.samples
                   if not math.isnan(s.extra.get("foreign_cores", math.nan)))
    if loads:
        facts["other processes' CPU during cells (cores: min / median / max)"] = \
            f"{loads[0]:.2f} / {loads[len(loads) // 2]:.2f} / {loads[-1]:.2f}"
    facts["run time"] = f"{(time.monotonic() - started) / 60:.1f} min"
    facts["date (UTC)"] = datetime.now(timezone.utc).strftime("%Y-%m-%d %H:%M")
    from bench.http import have_wrk

    facts["HTTP load"] = ("wrk -t1, bench/wrk/embed.lua, keep-alive, closed loop" if have_wrk()
                          else "bench/loadgen.py (no wrk here), keep-alive, closed loop")
    if "http" in args.suites and not args.url:
        env = ", ".join(args.server_env) or "defaults"
        facts["headwise servers"] = f"`headwise serve`, HEADWISE_PROVIDER={args.provider}, " \
                                    f"HEADWISE_PRECISION per variant; other settings: {env}"
    notes = [*run.notes,
             "Ceiling: the package's own ONNX graph in this process, all inputs the same length "
             "(no padding), outputs fetched as the service fetches them (sentence_embedding, plus "
             "attentions for the attention graph); intra-op threads = usable cores; on CPU, as the "
             "service does, no SkipLayerNormFusion at load time (the package's CPU graphs carry "
             "Add + LayerNormalization instead); ORT defaults otherwise (spinning on).",
             "headwise attention rows: all layers and heads, float16, base64, served by the "
             f"{run.serving_precision('attention')} server (attention.onnx is fp32).",
             "sentence-transformers: `encode(texts, batch_size=b)`, tokenising included; the naive "
             "server runs one such call per request (bench/naive_server.py).",
             *STANDARD_NOTES]
    write_report(args.out, name, facts, cfg, rows, notes, command)
    return 0
