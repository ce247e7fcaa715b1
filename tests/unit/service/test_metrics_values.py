"""How metric values are kept. In one process, a queue's depth is read at the scrape, not written
at each change. With several (process mode, several workers), values are written to files named
by the process's id, which service.metrics reads again only after a fork (not a getpid system
call per change); a forked child writes files of its own, a scrape merges both, and a queue's
depth is set at each change. Changes are written together (service.metric_values): at most
FLUSH_S after them, at a scrape of the process that made them, and at its exit."""

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
        from headwise.service import metric_values, metrics

        m = metrics.Metrics(gpu=None)
        m.requests.labels(route="/r", model="m", code="200").inc()
        # the values ask service.metrics who they are (no getpid per change): told another
        # process, they write that one's files
        metrics._Pid.value = 424242
        m.inflight.inc()
        metric_values.flush()
        assert "gauge_livesum_424242.db" in os.listdir(os.environ["PROMETHEUS_MULTIPROC_DIR"])
        metrics._Pid.value = os.getpid()
        m.inflight.inc()
        child = os.fork()
        if child == 0:
            m.requests.labels(route="/r", model="m", code="200").inc(2)
            metric_values.flush()  # os._exit skips atexit's
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


def test_changes_are_written_together_soon_at_a_scrape_and_at_exit(tmp_path):
    """Another process's scrape (a front-end's, of the engine's values) sees a change within
    FLUSH_S, and every change made before a process ends, with nothing called but exit."""
    script = textwrap.dedent("""
        import os, sys, time
        from prometheus_client import CollectorRegistry, generate_latest, multiprocess
        from headwise.service import metric_values, metrics

        def seen():  # what another process's scrape reads: the files only
            registry = CollectorRegistry()
            multiprocess.MultiProcessCollector(registry)
            return generate_latest(registry).decode()

        series = 'headwise_requests_total{code="200",model="m",route="/r"}'
        m = metrics.Metrics(gpu=None)
        child = m.requests.labels(route="/r", model="m", code="200")
        for _ in range(1000):
            child.inc()
        assert child._value.get() == 1000  # this process reads its own at once
        deadline = time.monotonic() + 5
        while f"{series} 1000.0" not in seen():
            assert time.monotonic() < deadline, seen()
            time.sleep(0.01)
        print("written within", round(time.monotonic() - deadline + 5, 3), "s")
        metric_values.FLUSH_S = 60  # no flush from the thread from now on
        time.sleep(0.2)
        child.inc(5)
        m.inflight.set(3)
        text = m.render().decode()  # this process's own scrape writes first
        assert f"{series} 1005.0" in text and "headwise_inflight_requests 3.0" in text, text
        child.inc(7)
        print("ok")
    """)
    env = {"PROMETHEUS_MULTIPROC_DIR": str(tmp_path), "PATH": "/usr/bin:/bin"}
    out = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0 and out.stdout.strip().endswith("ok"), out.stdout + out.stderr
    check = textwrap.dedent("""
        from prometheus_client import CollectorRegistry, generate_latest, multiprocess
        registry = CollectorRegistry()
        multiprocess.MultiProcessCollector(registry)
        print(generate_latest(registry).decode())
    """)
    seen = subprocess.run([sys.executable, "-c", check], env=env, capture_output=True, text=True, timeout=120)
    assert 'headwise_requests_total{code="200",model="m",route="/r"} 1012.0' in seen.stdout, seen.stdout + seen.stderr


def test_a_mostrecent_gauge_keeps_its_time(tmp_path):
    script = textwrap.dedent("""
        from prometheus_client import CollectorRegistry, Gauge, generate_latest, multiprocess
        from headwise.service import metric_values, metrics

        g = Gauge("seen_at", "x", multiprocess_mode="mostrecent", registry=CollectorRegistry())
        g.set(1)
        g.set(2)
        metric_values.flush()
        registry = CollectorRegistry()
        multiprocess.MultiProcessCollector(registry)
        assert "seen_at 2.0" in generate_latest(registry).decode()
        print("ok")
    """)
    env = {"PROMETHEUS_MULTIPROC_DIR": str(tmp_path), "PATH": "/usr/bin:/bin"}
    out = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0 and out.stdout.strip().endswith("ok"), out.stdout + out.stderr
