"""How metric values are kept. In one process, a queue's depth is read at the scrape, not written
at each change. With several (process mode, several workers), values are written to files named
by the process's id, which service.metrics reads again only after a fork (not a getpid system
call per change); a forked child writes files of its own, a scrape merges both, and a queue's
depth is written at each change."""

from __future__ import annotations

import subprocess
import sys
import textwrap


def test_one_process_reads_a_queue_depth_at_the_scrape():
    from prometheus_client import generate_latest

    from headwise.service.metrics import Metrics, QueueHooks

    m = Metrics(gpu=None)
    hooks = QueueHooks(m, "tiny", "fast")
    series = 'headwise_queue_depth{model="tiny",priority="plain",variant="fast"}'
    hooks.on_depth(7)
    assert f"{series} 7.0" in generate_latest(m.registry).decode()
    hooks.on_depth(0)
    assert f"{series} 0.0" in generate_latest(m.registry).decode()


def test_values_go_to_this_process_files_and_a_fork_gets_its_own(tmp_path):
    script = textwrap.dedent("""
        import os, sys
        from headwise.service import metrics

        m = metrics.Metrics(gpu=None)
        m.requests.labels(route="/r", model="m", code="200").inc()
        # the values ask service.metrics who they are (no getpid per change): told another
        # process, they write that one's files
        metrics._Pid.value = 424242
        m.inflight.inc()
        assert "gauge_livesum_424242.db" in os.listdir(os.environ["PROMETHEUS_MULTIPROC_DIR"])
        metrics._Pid.value = os.getpid()
        m.inflight.inc()
        child = os.fork()
        if child == 0:
            m.requests.labels(route="/r", model="m", code="200").inc(2)
            os._exit(0)
        os.waitpid(child, 0)
        files = sorted(os.listdir(os.environ["PROMETHEUS_MULTIPROC_DIR"]))
        print(files)
        assert f"counter_{os.getpid()}.db" in files and f"counter_{child}.db" in files
        text = m.render().decode()
        assert 'headwise_requests_total{code="200",model="m",route="/r"} 3.0' in text, text
        hooks = metrics.QueueHooks(m, "m", "fast")
        hooks.on_depth(4)
        assert 'headwise_queue_depth{model="m",priority="plain",variant="fast"} 4.0' in m.render().decode()
        print("ok")
    """)
    env = {"PROMETHEUS_MULTIPROC_DIR": str(tmp_path), "PATH": "/usr/bin:/bin"}
    out = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0 and out.stdout.strip().endswith("ok"), out.stdout + out.stderr
