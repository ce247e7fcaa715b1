"""bench/gpu_feed.py's pure parts (the GPU recipe's process step, bench/gpu.sh process): layouts,
cells, the device's view of a cell from two scrapes, GPU memory, when to stop, the report. No
timing is asserted here."""

from __future__ import annotations

import argparse
import math
import os

import pytest

from bench import gpu_feed
from bench.gpu_feed import (
    device_stats,
    family_ticks,
    layout_config,
    metric_total,
    nearest_ceiling,
    parse_cells,
    server_gpu_mib,
    should_stop,
)


def test_layouts_name_their_settings():
    assert layout_config("inproc:8") == ("inproc8", {"HEADWISE_ENGINE": "inproc", "HEADWISE_WORKERS": "8"})
    assert layout_config("process:12") == ("process12", {"HEADWISE_ENGINE": "process", "HEADWISE_FRONTENDS": "12"})
    for bad in ("process", "process:0", "threads:4", "inproc:x"):
        with pytest.raises(ValueError):
            layout_config(bad)


def test_a_layout_from_another_tree_is_named_by_its_commit(tmp_path):
    (tmp_path / "COMMIT").write_text("ae6c1ee\n")
    name, env = layout_config(f"process:12@{tmp_path}")
    assert name == "process12@ae6c1ee"
    assert env == {"HEADWISE_ENGINE": "process", "HEADWISE_FRONTENDS": "12", gpu_feed.TREE: str(tmp_path.resolve())}
    assert layout_config(f"inproc:8@{tmp_path / 'x'}")[0] == "inproc8@x"  # no COMMIT: the folder's name
    with pytest.raises(ValueError):
        layout_config("process:12@")


def test_cells_are_tokens_inputs_clients():
    assert parse_cells("20x1x256, 128x32x64,128X1X1") == [(20, 1, 256), (128, 32, 64), (128, 1, 1)]
    for bad in ("20x1", "20x0x4", "axbxc"):
        with pytest.raises(ValueError):
            parse_cells(bad)


def test_metric_total_sums_label_sets_and_is_nan_when_absent():
    text = ('headwise_gpu_memory_used_bytes{device="0"} 1048576.0\n'
            'headwise_gpu_memory_used_bytes{device="1"} 2097152.0\n'
            'headwise_gpu_memory_used_bytes_other 7\nplain_total 3.5\n')
    assert metric_total(text, "headwise_gpu_memory_used_bytes") == 3 * 2**20
    assert metric_total(text, "plain_total") == 3.5
    assert math.isnan(metric_total(text, "headwise_engine_busy_seconds_total"))


def scrape(inputs, calls, seconds, runs=None, busy=None):
    text = (f'headwise_batch_size_sum{{model="m",variant="fast.fp16"}} {inputs}\n'
            f'headwise_batch_size_count{{model="m",variant="fast.fp16"}} {calls}\n'
            f'headwise_inference_duration_seconds_sum{{model="m",variant="fast.fp16"}} {seconds}\n'
            f'headwise_inference_duration_seconds_count{{model="m",variant="fast.fp16"}} {calls}\n')
    if runs is not None:
        text += (f'headwise_engine_stacked_runs_count{{model="m",variant="fast.fp16"}} {runs}\n'
                 f'headwise_engine_stacked_runs_sum{{model="m",variant="fast.fp16"}} {calls}\n'
                 f'headwise_engine_busy_seconds_total{{model="m",variant="fast.fp16"}} {busy}\n')
    return text


def test_device_stats_inproc_are_the_servers_batches():
    st = device_stats(scrape(10, 2, 0.5), scrape(170, 12, 1.5), wall_s=2.0)
    assert st["batch"] == pytest.approx(16.0) and st["busy"] == pytest.approx(0.5) and math.isnan(st["stacked"])


def test_device_stats_in_process_mode_are_the_engines_runs():
    # 160 inputs in 10 front-end batches, stacked into 4 device runs busy 1.2 s of 2 s; the
    # front-ends' round trips (3 s) are not the device's time
    before, after = scrape(10, 2, 0.5, runs=2, busy=0.3), scrape(170, 12, 3.5, runs=6, busy=1.5)
    st = device_stats(before, after, wall_s=2.0)
    assert st["batch"] == pytest.approx(40.0) and st["busy"] == pytest.approx(0.6)
    assert st["stacked"] == pytest.approx(2.5)  # 10 front-end batches in 4 device runs
    # the engine's series appear with its first run: absent before counts as 0
    st = device_stats(scrape(0, 0, 0), scrape(64, 4, 1.0, runs=2, busy=0.5), wall_s=1.0)
    assert st["batch"] == pytest.approx(32.0) and st["busy"] == pytest.approx(0.5)


def test_nearest_ceiling_and_no_batch():
    ceiling = {(20, b): 100.0 * b for b in gpu_feed.CEILING_BATCHES}
    assert nearest_ceiling(ceiling, 20, 40.0) == (32, 3200.0)
    assert nearest_ceiling(ceiling, 20, 0.5) == (1, 100.0)
    assert nearest_ceiling(ceiling, 20, math.nan) == (1, 100.0)


def test_server_gpu_memory_leaves_the_harness_out():
    assert server_gpu_mib({10: 538.0, 11: 900.0, 12: 1100.0}, own=10) == (2000.0, 2)
    mib, n = server_gpu_mib({}, own=10)
    assert math.isnan(mib) and n == 0


def test_family_ticks_holds_this_process():
    assert os.getpid() in family_ticks(os.getpid())
    assert family_ticks(2**22 + 12345) == {}  # no such process


def test_should_stop_judges_by_the_repetitions_so_far():
    assert not should_stop(0, 0, 1.0)
    assert not should_stop(100, 1, None)
    assert not should_stop(150, 2, 5.0)  # 150 + 75 s < 300 s
    assert should_stop(160, 1, 5.0)  # 160 + 160 s > 300 s


def test_report_side_by_side_and_memory(monkeypatch):
    monkeypatch.setattr(gpu_feed, "machine_facts", lambda provider: {"cpu": "X", "git commit": "abc"})
    monkeypatch.setattr(gpu_feed, "gpu_name", lambda: "H100")
    configs = [layout_config("inproc:8"), layout_config("process:8")]
    args = argparse.Namespace(name="t", argv=["PKG"], provider="cuda", precision="fp16", reps=2, config_list=configs,
                              route="openai")

    def row(config, rep, rate, clients=256, errors=0):
        return {"config": config, "rep": rep, "tokens": 20, "inputs": 1, "clients": clients, "rate": rate, "p50": 5.0,
                "p99": 9.0, "batch": 30.0, "stacked": 3.0 if config.startswith("process") else math.nan, "busy": 0.5, "cpu_us": 100.0, "vs_ceiling": 0.4, "vs_best": 0.2,
                "ceiling_batch": 8, "errors": errors}

    rows = [row("inproc8", 0, 1000.0), row("process8", 0, 2000.0), row("process8", 1, 3000.0, errors=2),
            row("inproc8", 1, 1200.0), row("process8", 0, 50.0, clients=1)]
    memory = {"inproc8": [{"server_mib": 8000.0, "processes": 8, "device_mib": 8600.0}],
              "process8": [{"server_mib": 1500.0, "processes": 1, "device_mib": 2100.0}]}
    text = gpu_feed.report(args, rows, memory)
    assert "| inproc8 | 20 | 1 | 256 | 1,100 | 5.00 | 9.00 | 30.0 | – | 50% | 100 | 40.0% (b8) | 20.0% | 0 |" in text
    assert "| process8 | 20 | 1 | 256 | 2,500 | 5.00 | 9.00 | 30.0 | 3.0 | 50% |" in text and text.count("| 2 |\n") == 1  # errors summed
    assert "| 20 | 1 | 256 | 1,100 | 2,500 (2.27×) |" in text
    assert "| 20 | 1 | 1 | – | 50 |" in text  # a cell one layout lacks
    assert "| process8 | 1 | 1,500 | 2,100 |" in text and "2 of 2 repetitions" in text
    assert "provider cuda, fp16; requests to /v1/embeddings" in text
    nan = {"server_mib": math.nan, "processes": 0, "device_mib": math.nan}
    assert "GPU memory" not in gpu_feed.report(args, rows, {"inproc8": [nan], "process8": [nan]})


def test_main_refuses_no_configuration_and_duplicate_names():
    for argv in (["PKG"], ["PKG", "a=", "a=X=1"], ["PKG", "--layouts", "gpu:2"]):
        with pytest.raises(SystemExit):
            gpu_feed.main(argv)
