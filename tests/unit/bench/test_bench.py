"""The benchmark harness's pure parts: statistics, length-exact texts, the report, the wrk
output parser, the targets arithmetic. No timing is asserted here (speed is measured by
`headwise bench`, not by tests)."""

from __future__ import annotations

import argparse
import math

import numpy as np
import pytest

from bench import cli, report
from bench.cells import Row, Sample, ceiling_for
from bench.http import batch_totals, parse_wrk, sample_from, server_stats
from bench.report import markdown_table, report_markdown
from bench.stats import latency_summary, median, percentile, spread
from bench.targets import targets
from bench.texts import count_tokens, text_of_length
from tests.fixtures.tiny import tiny_tokenizer


# -- statistics ------------------------------------------------------------------------------
@pytest.mark.parametrize("q", [0, 1, 10, 25, 50, 75, 90, 95, 99, 100])
def test_percentile_matches_numpy(q):
    rng = np.random.default_rng(0)
    xs = rng.exponential(3.0, size=257).tolist()
    assert percentile(xs, q) == pytest.approx(np.percentile(xs, q))


def test_percentile_small_and_bad_inputs():
    assert percentile([5.0], 99) == 5.0
    assert percentile([1.0, 3.0], 50) == 2.0
    with pytest.raises(ValueError):
        percentile([], 50)
    with pytest.raises(ValueError):
        percentile([1.0], 101)


def test_median_and_spread_ignore_nan():
    assert median([3.0, 1.0, 2.0]) == 2.0
    assert median([1.0, math.nan, 3.0]) == 2.0
    assert math.isnan(median([]))
    assert spread([90.0, 100.0, 110.0]) == pytest.approx(0.2)
    assert spread([100.0]) == 0.0


def test_latency_summary_is_in_milliseconds():
    s = latency_summary([0.001] * 98 + [0.010, 0.020])
    assert s["p50"] == pytest.approx(1.0)
    assert s["p99"] > s["p95"] >= s["p50"]


# -- texts of an exact token length ----------------------------------------------------------------
@pytest.fixture(scope="module")
def tokenizer(tmp_path_factory):
    from tokenizers import Tokenizer

    d = tmp_path_factory.mktemp("tok")
    tiny_tokenizer(d)
    return Tokenizer.from_file(str(d / "tokenizer.json"))


@pytest.mark.parametrize("n", [2, 3, 5, 16, 20, 57, 128, 512])
def test_text_of_length_is_exact(tokenizer, n):
    text = text_of_length(tokenizer, n)
    assert count_tokens(tokenizer, text) == n
    assert len(tokenizer.encode(text).ids) == n  # specials included, no truncation


def test_text_of_length_handles_multi_token_words(tokenizer):
    # "quick"... are whole words in the tiny vocabulary; "zebra" is spelt out in pieces
    words = ["zebra", "quick", "xylophone", "fox"]
    for n in (4, 9, 10, 11, 33):
        assert count_tokens(tokenizer, text_of_length(tokenizer, n, words)) == n


def test_text_of_length_refuses_fewer_than_the_specials(tokenizer):
    with pytest.raises(ValueError):
        text_of_length(tokenizer, 1)


# -- rows, ceiling references, the table, the targets -------------------------------------------------
def _row(suite, variant, tokens, thr, p50, batch=None, conc=None, reps=3, **extra):
    r = Row(suite, variant, tokens, min(tokens, 256), batch=batch, concurrency=conc)
    for i in range(reps):  # medians: the middle repetition gives thr and p50
        k = (i - reps // 2) * 0.1
        r.samples.append(Sample(thr * (1 + k), p50 * (1 - k), p50 * 2, p50 * 3, 10, 0, dict(extra)))
    return r


@pytest.fixture
def rows():
    return [
        _row("ceiling", "fp32", 20, 450, 2.2, batch=1),
        _row("ceiling", "fp32", 20, 600, 26.0, batch=16),
        _row("ceiling", "fp32", 20, 620, 50.0, batch=32),
        _row("ceiling", "int8", 20, 800, 1.2, batch=1),
        _row("ceiling", "int8", 20, 1500, 10.0, batch=16),
        _row("ceiling", "fp32", 128, 100, 150.0, batch=16),
        _row("headwise", "fp32", 20, 300, 3.0, conc=1, mean_batch=1.0),
        _row("headwise", "fp32", 20, 540, 30.0, conc=16, mean_batch=15.5),
        _row("headwise", "fp32", 20, 560, 110.0, conc=64),
        _row("headwise", "int8", 20, 400, 2.9, conc=1),
        _row("headwise", "int8", 20, 900, 17.0, conc=16),
        _row("headwise", "attention", 20, 200, 5.0, conc=1),
        _row("headwise", "attention", 20, 300, 50.0, conc=16),
        _row("headwise", "fp32", 128, 70, 220.0, conc=16),
        _row("sentence-transformers", "fp32", 20, 400, 80.0, batch=32),
    ]


def test_ceiling_reference_is_same_graph_and_length_at_nearest_batch_below(rows):
    by = {(r.suite, r.variant, r.tokens, r.batch, r.concurrency): r for r in rows}
    assert ceiling_for(rows, by[("headwise", "fp32", 20, None, 16)]).batch == 16
    assert ceiling_for(rows, by[("headwise", "fp32", 20, None, 64)]).batch == 32
    assert ceiling_for(rows, by[("headwise", "int8", 20, None, 1)]).variant == "int8"
    assert ceiling_for(rows, by[("sentence-transformers", "fp32", 20, 32, None)]).batch == 32
    assert ceiling_for(rows, by[("headwise", "attention", 20, None, 1)]) is None  # not measured
    assert ceiling_for(rows, by[("ceiling", "fp32", 20, 1, None)]) is None


def test_markdown_table_has_one_line_per_cell_and_the_ratio(rows):
    md = markdown_table(rows)
    lines = md.strip().splitlines()
    assert len(lines) == 2 + len(rows)
    assert all(line.count("|") == lines[0].count("|") for line in lines)
    fp32_c16 = next(line for line in lines if "| headwise | fp32 | 20 | – | 16 |" in line)
    assert "540.0" in fp32_c16 and "| 90% |" in fp32_c16 and "fp32 b16" in fp32_c16
    assert "15.5" in fp32_c16  # the server's mean batch
    # ceiling rows come first, then headwise, then the peers
    suites = [line.split("|")[1].strip() for line in lines[2:]]
    assert suites.index("ceiling") < suites.index("headwise") < suites.index("sentence-transformers")


def test_targets_arithmetic(rows):
    ts = {t.name.split(" [")[0]: t for t in targets(rows)}
    t = ts["fp32, 16 clients vs ceiling batch 16"]
    assert t.value == pytest.approx(0.9) and t.ok4 and t.ok9
    t = ts["int8, 16 clients vs ceiling batch 16"]
    assert t.value == pytest.approx(0.6) and not t.ok4 and not t.ok9
    t = ts["int8, 16 clients vs sentence-transformers batch 32"]
    assert t.value == pytest.approx(2.25) and t.ok9
    t = ts["fp32, 1 client p50 − ceiling batch-1 p50"]
    assert t.value == pytest.approx(0.8) and t.ok9
    t = ts["int8, 1 client p50 − ceiling batch-1 p50"]
    assert t.value == pytest.approx(1.7) and t.ok4 and not t.ok9
    t = ts["attention (all heads, base64 fp16) / none, 1 client p50"]
    assert t.value == pytest.approx(5.0 / 3.0) and t.ok9
    t = ts["attention / none, time per input at 16 clients"]
    assert t.value == pytest.approx(1.8) and t.ok4 and t.ok9
    t = ts["fp32, 128 tokens, 16 clients vs ceiling batch 16"]
    assert t.value == pytest.approx(0.7) and not t.ok9


def test_targets_use_paired_repetitions():
    # the machine slowed down in repetition 2 for both systems alike: the paired ratio stays 0.9
    a = Row("headwise", "fp32", 20, 20, concurrency=16)
    b = Row("ceiling", "fp32", 20, 20, batch=16)
    for speed in (1.0, 0.3, 0.9):
        a.samples.append(Sample(540 * speed, 30, 30, 30))
        b.samples.append(Sample(600 * speed, 26, 26, 26))
    (t,) = [t for t in targets([a, b]) if t.name.startswith("fp32, 16 clients")]
    assert t.value == pytest.approx(0.9) and "0.9" not in t.issue9 and "paired" in t.measured


def test_disturbed_repetitions_are_left_out_when_two_quiet_ones_remain():
    r = Row("ceiling", "fp32", 20, 20, batch=16)
    for thr, others in ((500, 0.0), (100, 1.2), (520, 0.1)):
        r.samples.append(Sample(thr, 30, 30, 30, extra={"foreign_cores": others}))
    assert r.med("throughput") == pytest.approx(510) and len(r.used) == 2
    r.samples[2].extra["foreign_cores"] = 0.9  # only one quiet left: every repetition counts
    assert r.med("throughput") == 500 and len(r.used) == 3
    assert "| 3/3 |" in markdown_table([r])


def test_gpu_targets():
    rows = [_row("headwise", "fp16", 128, 3000, 2.5, conc=64), _row("ceiling", "fp16", 128, 3500, 9, batch=64),
            _row("headwise", "fp16", 128, 400, 2.5, conc=1)]
    ts = {t.name: t for t in targets(rows)}
    t = ts["GPU fp16, 64 clients vs ceiling batch 64 [128 tok]"]
    assert t.value == pytest.approx(3000 / 3500) and t.ok9 and t.ok4 is None
    t = ts["GPU fp16, 1 client p50 [128 tok] (absolute)"]
    assert t.value == pytest.approx(2.5) and t.ok9 and t.measured.startswith("2.50 ms;")


def test_report_has_facts_targets_table_and_plot(rows):
    md = report_markdown("headwise bench: test", {"cores usable (affinity, cgroup)": 2}, rows,
                         "test.png", "headwise bench --quick", ["a note"])
    for part in ("## Machine", "cores usable", "## Targets", "## Results", "![", "test.png",
                 "headwise bench --quick", "- a note"):
        assert part in md


def test_plot_writes_a_png(rows, tmp_path):
    from bench.plot import plot

    out = plot(rows, tmp_path / "p.png", "test")
    assert out is not None and out.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


# -- wrk output and server metrics ------------------------------------------------------------------
WRK_OUT = """Running 2s test @ http://127.0.0.1:8000/v1/embed
  1 threads and 16 connections
HEADWISE_JSON {"requests": 1000, "duration_us": 2000000, "bytes": 5000000, "connect": 0, "read": 0, "write": 0, "status": 2, "timeout": 1, "p50": 25000, "p90": 30000, "p95": 31000, "p99": 40000, "mean": 25500.0, "max": 50000}
"""


def test_parse_wrk_and_sample():
    res = parse_wrk(WRK_OUT)
    s = sample_from(res)
    assert s.throughput == pytest.approx(500.0)
    assert (s.p50, s.p95, s.p99) == (25.0, 31.0, 40.0)
    assert s.errors == 3 and s.requests == 1000
    with pytest.raises(RuntimeError):
        parse_wrk("no result here")
    empty = sample_from({"requests": 0, "duration_us": 2000000})
    assert empty.throughput == 0 and math.isnan(empty.p50)


def test_batch_totals_sums_every_variant():
    text = """# HELP headwise_batch_size inputs per inference call
headwise_batch_size_bucket{le="1.0",model="m",variant="fast"} 3.0
headwise_batch_size_count{model="m",variant="fast"} 10.0
headwise_batch_size_sum{model="m",variant="fast"} 100.0
headwise_batch_size_count{model="m",variant="attention"} 2.0
headwise_batch_size_sum{model="m",variant="attention"} 6.0
headwise_batch_tokens_sum{model="m",variant="fast"} 9999.0
"""
    assert batch_totals(text) == (106.0, 12.0)
    assert batch_totals("") == (0.0, 0.0)


def test_server_stats_from_two_scrapes():
    def scrape(inputs, calls, seconds):
        return (f'headwise_batch_size_sum{{model="m",variant="fast"}} {inputs}\n'
                f'headwise_batch_size_count{{model="m",variant="fast"}} {calls}\n'
                f'headwise_inference_duration_seconds_sum{{model="m",variant="fast"}} {seconds}\n'
                f'headwise_inference_duration_seconds_count{{model="m",variant="fast"}} {calls}\n')

    st = server_stats(scrape(10, 2, 0.5), scrape(170, 12, 1.5), wall_s=2.0)
    assert st["mean_batch"] == pytest.approx(16.0) and st["calls"] == 10
    assert st["infer_ms"] == pytest.approx(100.0) and st["ort_busy"] == pytest.approx(0.5)
    assert server_stats("", "", 2.0) == {}  # a server without these metrics (the naive peer)


def test_server_cpu_per_input_from_process_tree_snapshots():
    from bench.http import cpu_us_per_input
    from bench.noise import TICK, ticks_since

    assert ticks_since({1: 100, 2: 50}, {1: 130, 3: 20}) == 50  # 3 forked since: all its own; 2 exited
    assert cpu_us_per_input({1: 0}, {1: TICK}, 1000) == pytest.approx(1000.0)  # 1 s over 1000 inputs
    assert math.isnan(cpu_us_per_input(None, {1: 5}, 10))  # a server the harness did not start
    assert math.isnan(cpu_us_per_input({}, {}, 0))


def test_measure_records_server_cpu_padded_length_and_the_column(monkeypatch):
    from types import SimpleNamespace

    from bench import http as bench_http
    from bench.noise import TICK

    snaps = iter([{7: 100}, {7: 100 + 2 * TICK, 8: TICK}])  # 3 s of CPU, a worker forked meanwhile
    monkeypatch.setattr(bench_http, "group_ticks", lambda pgids: next(snaps) if pgids == [7] else {})
    monkeypatch.setattr(bench_http, "load", lambda *a, **k: parse_wrk(WRK_OUT))  # 1000 requests in 2 s
    scrapes = iter(['headwise_batch_size_sum{v="fast"} 0\nheadwise_batch_size_count{v="fast"} 0\n'
                    'headwise_batch_tokens_sum{v="fast"} 0\n',
                    'headwise_batch_size_sum{v="fast"} 4000\nheadwise_batch_size_count{v="fast"} 500\n'
                    'headwise_batch_tokens_sum{v="fast"} 128000\n'])
    server = SimpleNamespace(url="http://x", proc=SimpleNamespace(pid=7), metrics_text=lambda: next(scrapes))
    s = bench_http.measure(server, "/v1/embed", b"{}", 16, 2, inputs_per_request=4)
    assert s.throughput == pytest.approx(2000.0)
    assert s.extra["server_cpu_us_per_input"] == pytest.approx(3e6 / 4000)
    assert s.extra["mean_batch"] == pytest.approx(8.0) and s.extra["padded"] == pytest.approx(32.0)
    row = Row("headwise", "fp32", 20, 20, concurrency=16, samples=[s])
    assert "server CPU µs/input" in markdown_table([row]) and "| 750 |" in markdown_table([row])
    assert row.to_json()["median"]["server_cpu_us_per_input"] == pytest.approx(750.0)


def test_host_work_ratio_pairs_repetitions():
    from bench.host_work import paired_ratio

    host = {("a", 0): 200.0, ("b", 0): 100.0, ("a", 1): 400.0, ("b", 1): 100.0, ("a", 2): 90.0, ("b", 2): 0.0}
    recs = [{"rep": rep, "server": name, "shape": "1×20", "host_us": h} for (name, rep), h in host.items()]
    recs.append({"rep": 0, "server": "b", "shape": "32×128", "host_us": 1.0})  # another shape: not paired
    assert paired_ratio(recs, "a", "b", "1×20") == pytest.approx(4.0)  # median of 2, 4 and ∞ (b did no host work)


# -- the command line -----------------------------------------------------------------------------------
def _args(*argv):
    p = argparse.ArgumentParser()
    cli.add_arguments(p)
    return p.parse_args(list(argv))


def test_plan_defaults_quick_and_overrides():
    full = cli.plan(_args())
    assert full["concurrency"] == [1, 16, 64] and full["reps"] >= 3
    assert full["variants"] == ["fp32", "int8", "attention"]
    quick = cli.plan(_args("--quick", "--lengths", "20"))
    assert quick["lengths"] == [20] and quick["reps"] >= 3 and quick["seconds"] < full["seconds"]
    assert cli.plan(_args("--provider", "cuda"))["variants"] == ["fp16", "attention"]
    with pytest.raises(SystemExit):
        cli.plan(_args("--suites", "ceiling,nope"))


def test_report_again_from_raw_json(rows, tmp_path, monkeypatch):
    import json

    from bench import cells

    monkeypatch.setattr(cells, "DISTURBED_CORES", cells.DISTURBED_CORES)  # main() sets it

    raw = tmp_path / "run.raw.json"
    raw.write_text(json.dumps({"facts": {"cpu": "test"}, "config": {}, "command": "headwise bench --quick",
                               "notes": ["kept note"], "rows": [r.to_json() for r in rows]}))
    again = report.rows_from_json(json.loads(raw.read_text())["rows"])
    assert [r.key for r in again] == [r.key for r in rows]
    assert [r.med("throughput") for r in again] == [r.med("throughput") for r in rows]
    args = _args("--from-raw", str(raw), "--out", str(tmp_path / "out"), "--disturbed-cores", "none")
    (tmp_path / "out").mkdir()
    assert cli.main(args) == 0
    md = (tmp_path / "out" / "run.md").read_text()
    assert "headwise bench --quick" in md and "kept note" in md and "## Targets" in md


def test_ab_server_spec():
    from bench.ab import parse_server

    name, tree, env = parse_server("spin=.:HEADWISE_THREADS=2,X=a=b")
    assert name == "spin" and tree.is_absolute() and env == {"HEADWISE_THREADS": "2", "X": "a=b"}
    assert parse_server("base=/tmp/x")[2] == {}


def test_layernorm_refuse_undoes_the_export_rewrite(tmp_path):
    import onnx

    from bench.experiments.layernorm import refuse
    from headwise.export.optimize import unfuse_skip_layernorm
    from tests.fixtures.graphs import graph_with_skip_layernorms, run

    original, path = tmp_path / "a.onnx", tmp_path / "b.onnx"
    graph_with_skip_layernorms(original, with_bias=True)
    graph_with_skip_layernorms(path, with_bias=True)
    assert unfuse_skip_layernorm(path) == 2 and refuse(path) == 2
    assert [n.op_type for n in onnx.load(str(path)).graph.node] == ["SkipLayerNormalization"] * 2
    feeds = {k: np.random.default_rng(2).normal(size=(2, 3, 16)).astype(np.float32) for k in ("x", "skip")}
    np.testing.assert_allclose(run(path, feeds), run(original, feeds), atol=1e-6)


def test_facts_name_uncommitted_changes_in_the_measured_code(monkeypatch):
    """git's pathspecs (service, bench, ...) are read from the repository's root, so a change
    under them shows in the report's commit line."""
    from bench import facts

    assert facts._git("rev-parse", "--show-prefix") == ""  # run at the root, not in bench/
    assert facts._git("status", "--porcelain", "--", "no-such-dir") == ""
    monkeypatch.setattr(facts, "_git", lambda *a, **_: " M bench/facts.py" if a[0] == "status" else "abc123")
    monkeypatch.setattr(facts, "_wrk_version", lambda: "wrk")
    assert facts.machine_facts("cpu")["git commit"] == "abc123 + uncommitted changes in bench/facts.py"
