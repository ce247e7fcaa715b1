"""docker/grafana/dashboards/headwise.json: every PromQL expression parses (promtool) and
names only the metrics docs/metrics.md lists; every panel issue 7 lists is there. And
docs/metrics.md lists exactly what headwise/service/metrics.py registers (names, types, labels,
histogram buckets), so a metric added without documenting it fails here.

The helpers at the top (`dashboard_queries`, `metric_names`) are also used by
tests/e2e/test_prometheus_live.py, which runs every query against a live Prometheus.
"""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import yaml

from tests.fixtures.dashboard import (
    ALERTS,
    GRAFANA_RANGE_VARS,
    TARGET_LABELS,
    _walk_panels,
    allowed_metrics,
    dashboard,
    dashboard_queries,
    documented_metrics,
    metric_names,
    parse_metrics_md,
    registered_metrics,
    substitute,
    used_labels,
)
from tests.fixtures.programs import require_program

# One metric as exposed: (type, label names, histogram upper bounds without +Inf, else None).
# Names are as scraped: counters with their `_total`, histograms by their base name.



# ------------------------------------------------------------------ the metrics: code and docs










# ------------------------------------------------------------------ dashboard helpers

















def promtool() -> str:
    return require_program("promtool", "apt-get install prometheus")


def check_syntax(exprs: list[str], tmp_path: Path) -> subprocess.CompletedProcess:
    """`promtool check rules` on a rules file holding each expression as a recording rule:
    promtool parses every expr with Prometheus's own PromQL parser."""
    rules = {"groups": [{"name": "dashboard", "rules": [
        {"record": f"dashboard:expr_{i}", "expr": e} for i, e in enumerate(exprs)]}]}
    path = tmp_path / "dashboard_rules.yml"
    path.write_text(yaml.safe_dump(rules, sort_keys=False, width=10_000))
    return subprocess.run([promtool(), "check", "rules", str(path)],
                          capture_output=True, text=True, timeout=120)


# ------------------------------------------------------------------ tests


def test_dashboard_has_queries():
    assert len(dashboard_queries()) >= 20


def test_every_query_parses(tmp_path):
    queries = dashboard_queries()
    res = check_syntax([substitute(q) for _, q in queries], tmp_path)
    assert res.returncode == 0, res.stdout + res.stderr
    assert f"SUCCESS: {len(queries)} rules found" in res.stdout


def test_syntax_check_catches_a_broken_query(tmp_path):
    good = substitute(dashboard_queries()[0][1])
    res = check_syntax([good, "sum by (le (rate(headwise_batch_size_bucket[1m]))"], tmp_path)
    assert res.returncode != 0
    res = check_syntax([good, 'rate(headwise_requests_total{code=~"5.."}[$__rate_interval])'], tmp_path)
    assert res.returncode != 0, "an unsubstituted Grafana variable must not parse"


def test_queries_name_only_documented_metrics():
    allowed = allowed_metrics()
    for where, q in dashboard_queries():
        names = metric_names(q)
        assert names, f"{where}: no metric in {q!r}"
        unknown = names - allowed.keys()
        assert not unknown, f"{where}: {sorted(unknown)} are not in docs/metrics.md"


def test_queries_use_only_existing_labels():
    allowed = allowed_metrics()
    for where, q in dashboard_queries():
        per_metric, grouping = used_labels(q)
        every = set().union(*(allowed[n] for n in metric_names(q))) | TARGET_LABELS | {"le"}
        for metric, labels in per_metric.items():
            extra = labels - allowed[metric] - TARGET_LABELS
            assert not extra, f"{where}: {metric} has no label(s) {sorted(extra)}"
        assert grouping <= every, f"{where}: grouping by unknown label(s) {sorted(grouping - every)}"


def test_alert_rules_name_only_documented_metrics():
    allowed = allowed_metrics()
    for group in yaml.safe_load(ALERTS.read_text())["groups"]:
        for rule in group["rules"]:
            unknown = metric_names(rule["expr"]) - allowed.keys()
            assert not unknown, f"{rule.get('alert')}: {sorted(unknown)}"


def test_lexer_finds_metrics_and_not_functions():
    q = ('histogram_quantile(0.99, sum by (le, route) (rate(headwise_request_duration_seconds_bucket'
         '{route=~"/v1/embed|x"}[5m]))) / on (job) group_left (model) (headwise_model_info or vector(0))')
    assert metric_names(q) == {"headwise_request_duration_seconds_bucket", "headwise_model_info"}
    per_metric, grouping = used_labels(q)
    assert per_metric == {"headwise_request_duration_seconds_bucket": {"route"}}
    assert grouping == {"le", "route", "job", "model"}


def test_metrics_md_lists_exactly_the_registered_metrics():
    """docs/metrics.md's table and headwise/service/metrics.py's registry: the same metrics, with the
    same types, label names and histogram buckets."""
    documented, registered = documented_metrics(), registered_metrics(every_metric())
    assert len(documented) >= 20, "docs/metrics.md: the table was not found or not parsed"
    if not any(n.startswith("process_") for n in registered):  # ProcessCollector reads /proc: Linux
        documented = {n: v for n, v in documented.items() if not n.startswith("process_")}
    undocumented = sorted(registered.keys() - documented.keys())
    assert not undocumented, f"registered but not in docs/metrics.md: {undocumented}"
    gone = sorted(documented.keys() - registered.keys())
    assert not gone, f"in docs/metrics.md but not registered: {gone}"
    for name, (kind, labels, buckets) in registered.items():
        doc_kind, doc_labels, doc_buckets = documented[name]
        assert doc_kind == kind, f"{name}: docs/metrics.md says {doc_kind}, the code registers a {kind}"
        assert doc_labels == labels, f"{name}: docs/metrics.md labels {sorted(doc_labels)}, code {sorted(labels)}"
        assert doc_buckets == buckets, f"{name}: docs/metrics.md buckets {doc_buckets}, code {buckets}"


def every_metric():
    """A `Metrics` with everything a setting can add registered: the head-drift metrics
    (HEADWISE_ATTENTION_SAMPLE > 0), and GPU metrics from a fake NVML."""
    from headwise.service.gpu_metrics import GpuCollector
    from headwise.service.metrics import Metrics
    from tests.unit.fakes import FakeNvml

    m = Metrics(gpu=GpuCollector(FakeNvml()))
    m.enable_head_drift()
    return m


HEAD_DRIFT = {"headwise_head_attention_entropy", "headwise_head_special_share", "headwise_head_samples_total"}


def test_head_drift_metrics_are_documented_and_absent_by_default():
    """docs/metrics.md's "Head drift" table lists exactly the metrics `enable_head_drift`
    adds, which a default registry (HEADWISE_ATTENTION_SAMPLE=0) does not have."""
    from tests.fixtures.dashboard import METRICS_MD, parse_metrics_md

    section = METRICS_MD.read_text().split("\n## Head drift\n", 1)[1].split("\n## ", 1)[0]
    assert set(parse_metrics_md(section)) == HEAD_DRIFT
    assert registered_metrics(every_metric()).keys() >= HEAD_DRIFT
    assert not HEAD_DRIFT & registered_metrics().keys()


def documented_routes(text: str) -> list[str]:
    """The paths docs/metrics.md lists for headwise_requests_total's `route` label: the
    backticked paths between `**route**:` and `unmatched`."""
    row = next(line for line in text.splitlines() if line.startswith("| `headwise_requests_total` |"))
    listed = row.split("**route**:", 1)[1].split("`unmatched`", 1)[0]
    return re.findall(r"`(/[^`]*)`", listed)


def test_metrics_md_lists_every_route_of_the_app(tmp_path):
    """headwise_requests_total's `route` values are the app's path templates: docs/metrics.md
    lists each route the app serves (the included routers' too), and none it does not."""
    from starlette.routing import Route

    from headwise.service.api.app import api_routes, create_app
    from headwise.service.settings import Settings
    from tests.fixtures.dashboard import METRICS_MD

    app = create_app(Settings(models_dir=tmp_path))
    served = {r.path for r in api_routes(app.router.routes)} | \
        {r.path for r in app.router.routes if type(r) is Route}
    listed = documented_routes(METRICS_MD.read_text())
    assert len(listed) == len(set(listed)), f"docs/metrics.md lists a route twice: {sorted(listed)}"
    assert not sorted(served - set(listed)), f"served but not in docs/metrics.md's route list: {sorted(served - set(listed))}"
    assert not sorted(set(listed) - served), f"in docs/metrics.md's route list but not served: {sorted(set(listed) - served)}"
    assert {"/v1/embed", "/embed", "/v2/models/{model}/infer", "/"} <= served  # the walk reached every router


def test_an_undocumented_metric_is_caught():
    from prometheus_client import Counter, Histogram

    from headwise.service.metrics import Metrics

    m = Metrics()
    m.extra = Counter("headwise_extra_total", "not documented", ["model"], registry=m.registry)
    m.spans = Histogram("headwise_spans_seconds", "not documented", buckets=(0.5, 1.0), registry=m.registry)
    registered = registered_metrics(m)
    assert registered["headwise_extra_total"] == ("counter", frozenset({"model"}), None)
    assert registered["headwise_spans_seconds"] == ("histogram", frozenset(), (0.5, 1.0))
    assert {"headwise_extra_total", "headwise_spans_seconds"}.isdisjoint(documented_metrics())


def test_metrics_md_parser():
    text = """
| metric | type | labels | meaning |
|---|---|---|---|
| `a_total` | counter | **model**: the package name; **reason**: `x` or `y` | one |
| `b_seconds` | histogram, buckets 0.001, 0.5, 1, 10 | — | two |
| `c` | gauge (multiprocess: `livesum`) | **model**: `m`<br>**variant**: `fast` | three |

| other | table |
|---|---|
| `d` | x |
"""
    assert parse_metrics_md(text) == {
        "a_total": ("counter", frozenset({"model", "reason"}), None),
        "b_seconds": ("histogram", frozenset(), (0.001, 0.5, 1.0, 10.0)),
        "c": ("gauge", frozenset({"model", "variant"}), None),
    }


# ------------------------------------------------------------------ panels issue 7 asks for


def _panels() -> list[dict]:
    return [p for p in _walk_panels(dashboard()["panels"]) if p["type"] != "row"]


def _find(pred, what: str) -> dict:
    found = [p for p in _panels() if pred(p, " ".join(t["expr"] for t in p.get("targets", [])))]
    assert found, f"no panel shows {what}"
    return found[0]


def _squash(s: str) -> str:
    return re.sub(r"\s+", "", s)


def test_required_panels():
    _find(lambda p, e: "headwise_requests_total" in e and "by(route,code)" in _squash(e),
          "request rate by route and code")
    _find(lambda p, e: "headwise_request_failures_total" in e and "by(reason)" in _squash(e),
          "error rate by reason")
    lat = _find(lambda p, e: "headwise_request_duration_seconds_bucket" in e
                and all(f"histogram_quantile({q}," in e for q in ("0.5", "0.95", "0.99")),
                "latency p50/p95/p99")
    assert len(lat["targets"]) == 3
    _find(lambda p, e: "headwise_queue_depth" in e, "queue depth")
    _find(lambda p, e: "headwise_queue_duration_seconds" in e and "headwise_inference_duration_seconds" in e,
          "queue time vs inference time")
    for metric in ("headwise_batch_size_bucket", "headwise_batch_tokens_bucket"):
        hm = _find(lambda p, e, m=metric: p["type"] == "heatmap" and m in e, f"{metric} distribution")
        assert hm["targets"][0]["format"] == "heatmap"
    _find(lambda p, e: "rate(headwise_input_tokens_sum" in _squash(e), "tokens per second")
    _find(lambda p, e: "rate(headwise_attention_bytes_total" in _squash(e), "attention bytes per second")
    info = _find(lambda p, e: "headwise_model_info" in e, "model, provider and precision")
    assert {"model", "provider", "precision"} <= used_labels(info["targets"][0]["expr"])[1]
    _find(lambda p, e: "process_resident_memory_bytes" in e, "process memory")
    _find(lambda p, e: "process_cpu_seconds_total" in e, "process CPU")


def test_head_drift_row():
    """Issue 30: a "Head drift" row with each head's median entropy, the special-token share per
    head, and the sampled and dropped rates; its alert reads the same histogram."""
    dash = dashboard()
    (row,) = [p for p in dash["panels"] if p["type"] == "row" and p["title"] == "Head drift"]
    below = [p for p in dash["panels"] if p["type"] != "row" and p["gridPos"]["y"] > row["gridPos"]["y"]]
    exprs = {p["id"]: " ".join(t["expr"] for t in p["targets"]) for p in below}

    def shows(pred, what):
        assert any(pred(_squash(e)) for e in exprs.values()), f"the Head drift row shows no {what}"

    shows(lambda e: "histogram_quantile(0.5," in e and "headwise_head_attention_entropy_bucket" in e
          and "by(model,layer,head,le)" in e, "median entropy per (layer, head)")
    shows(lambda e: "headwise_head_special_share_bucket" in e and "by(model,layer,head,le)" in e,
          "special-token share per (layer, head)")
    shows(lambda e: "rate(headwise_head_samples_total" in e and "outcome" in e, "sampled and dropped rates")
    rules = [r for g in yaml.safe_load(ALERTS.read_text())["groups"] for r in g["rules"]]
    (drift,) = [r for r in rules if r.get("alert") == "HeadwiseHeadEntropyDrift"]
    assert "headwise_head_attention_entropy_bucket" in drift["expr"] and drift["for"] == "30m"
    assert {"layer", "head"} <= used_labels(drift["expr"])[1]


def test_dashboard_shape():
    dash = dashboard()
    assert dash["uid"] == "headwise" and dash["title"]
    panels = list(_walk_panels(dash["panels"]))
    ids = [p["id"] for p in panels]
    assert len(ids) == len(set(ids)), "panel ids must be unique"
    cells = set()
    for p in panels:
        g = p["gridPos"]
        assert g["x"] + g["w"] <= 24
        mine = {(x, y) for x in range(g["x"], g["x"] + g["w"]) for y in range(g["y"], g["y"] + g["h"])}
        assert not mine & cells, f"panel {p['title']!r} overlaps another"
        cells |= mine
        for t in p.get("targets", []):
            assert t["datasource"] == {"type": "prometheus", "uid": "${datasource}"}
            assert t["refId"] and t["expr"].strip()
    variables = {v["name"] for v in dash["templating"]["list"]}
    for _, q in dashboard_queries(dash):
        for var in re.findall(r"\$\{?(\w+)", q):
            assert var in variables or var in GRAFANA_RANGE_VARS, f"unknown variable ${var}"
