"""docker/grafana/dashboards/headwise.json: every PromQL expression parses (promtool) and
names only DESIGN.md §6 metrics; every panel issue 7 lists is there.

The helpers at the top (`dashboard_queries`, `metric_names`) are also used by
tests/e2e/test_prometheus_live.py, which runs every query against a live Prometheus.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[2]
DASHBOARD = ROOT / "docker" / "grafana" / "dashboards" / "headwise.json"
ALERTS = ROOT / "docker" / "prometheus" / "alerts.yml"

# DESIGN.md §6: metric → labels. Histograms export _bucket/_sum/_count, counters _total.
DESIGN_METRICS: dict[str, tuple[str, set[str]]] = {
    "headwise_requests_total": ("counter", {"route", "model", "code"}),
    "headwise_request_duration_seconds": ("histogram", {"route", "model"}),
    "headwise_request_failures_total": ("counter", {"model", "reason"}),
    "headwise_queue_duration_seconds": ("histogram", {"model", "variant"}),
    "headwise_tokenize_duration_seconds": ("histogram", {"model"}),
    "headwise_inference_duration_seconds": ("histogram", {"model", "variant"}),
    "headwise_batch_size": ("histogram", {"model", "variant"}),
    "headwise_batch_tokens": ("histogram", {"model", "variant"}),
    "headwise_input_tokens": ("histogram", {"model"}),
    "headwise_queue_depth": ("gauge", {"model", "variant"}),
    "headwise_inflight_requests": ("gauge", set()),
    "headwise_attention_bytes_total": ("counter", {"model"}),
    "headwise_model_info": ("gauge", {"model", "version", "provider", "precision"}),
}
# prometheus-client's standard collectors (ProcessCollector, PlatformCollector, GCCollector).
STANDARD_METRICS: dict[str, set[str]] = {
    "process_cpu_seconds_total": set(), "process_resident_memory_bytes": set(),
    "process_virtual_memory_bytes": set(), "process_open_fds": set(), "process_max_fds": set(),
    "process_start_time_seconds": set(), "python_info": {"implementation", "major", "minor",
                                                         "patchlevel", "version"},
    "python_gc_objects_collected_total": {"generation"}, "python_gc_collections_total": {"generation"},
    "python_gc_objects_uncollectable_total": {"generation"},
    "up": set(),
}
TARGET_LABELS = {"job", "instance"}  # added by Prometheus to every scraped series


def allowed_metrics() -> dict[str, set[str]]:
    """Every series name headwise may export → its labels."""
    out = dict(STANDARD_METRICS)
    for name, (kind, labels) in DESIGN_METRICS.items():
        if kind == "histogram":
            out[name + "_bucket"] = labels | {"le"}
            out[name + "_sum"] = labels
            out[name + "_count"] = labels
        else:
            out[name] = labels
    return out


# ------------------------------------------------------------------ shared helpers

GRAFANA_RANGE_VARS = {"__rate_interval": "1m", "__interval": "15s", "__range": "1h",
                      "__range_s": "3600", "__interval_ms": "15000"}


def substitute(expr: str, rate_interval: str = "1m", value: str = ".*") -> str:
    """Grafana's variables replaced the way it would: ranges by durations, the dashboard's
    template variables (all `=~"$var"` regex matchers) by their "All" value."""
    ranges = {**GRAFANA_RANGE_VARS, "__rate_interval": rate_interval}

    def repl(m: re.Match) -> str:
        name = m.group(1) or m.group(2)
        return ranges.get(name, value)

    return re.sub(r"\$\{(\w+)(?::\w+)?\}|\$(\w+)", repl, expr)


def _walk_panels(panels: list[dict]):
    for p in panels:
        yield p
        yield from _walk_panels(p.get("panels", []))


def dashboard() -> dict:
    return json.loads(DASHBOARD.read_text())


def dashboard_queries(dash: dict | None = None) -> list[tuple[str, str]]:
    """(where, PromQL) for every panel target and every template-variable query, with
    label_values(selector, label) reduced to its selector."""
    dash = dash or dashboard()
    out = []
    for p in _walk_panels(dash["panels"]):
        for t in p.get("targets", []):
            out.append((f"panel {p['id']} {p['title']!r} {t['refId']}", t["expr"]))
    for v in dash.get("templating", {}).get("list", []):
        if v["type"] != "query":
            continue
        q = v["query"]["query"] if isinstance(v["query"], dict) else v["query"]
        m = re.fullmatch(r"\s*label_values\((.*),\s*(\w+)\)\s*", q)
        out.append((f"variable {v['name']}", m.group(1) if m else q))
    return out


_STRING = re.compile(r'"(?:[^"\\]|\\.)*"|\'(?:[^\'\\]|\\.)*\'|`[^`]*`')
_GROUPING = re.compile(r"\b(by|without|on|ignoring|group_left|group_right)\s*\(([^)]*)\)")
_KEYWORDS = {"by", "without", "on", "ignoring", "group_left", "group_right", "bool", "and", "or",
             "unless", "offset", "inf", "nan", "atan2"}


def metric_names(expr: str) -> set[str]:
    """Metric names an expression selects (a small lexer: enough for dashboards and rules)."""
    e = _STRING.sub('""', expr)
    e = re.sub(r"\{[^}]*\}", " ", e)
    e = re.sub(r"\[[^\]]*\]", " ", e)
    e = _GROUPING.sub(" ", e)
    e = re.sub(r"\boffset\s+\S+", " ", e)
    names = set()
    for m in re.finditer(r"(?<![\w.])([a-zA-Z_:][\w:]*)(\s*\()?", e):
        word, call = m.group(1), m.group(2)
        if call or word.lower() in _KEYWORDS:
            continue
        names.add(word)
    return names


def used_labels(expr: str) -> tuple[dict[str, set[str]], set[str]]:
    """(metric → labels in its own {matchers}, labels in by/without/on/ignoring/group_*)."""
    e = _STRING.sub('""', expr)
    per_metric: dict[str, set[str]] = {}
    for m in re.finditer(r"([a-zA-Z_:][\w:]*)\s*\{([^}]*)\}", e):
        labels = set(re.findall(r"([a-zA-Z_]\w*)\s*(?:=~|!~|!=|=)", m.group(2)))
        per_metric.setdefault(m.group(1), set()).update(labels)
    grouping = set()
    for m in _GROUPING.finditer(e):
        grouping.update(x.strip() for x in m.group(2).split(",") if x.strip())
    return per_metric, grouping


def promtool() -> str:
    found = shutil.which("promtool")
    if found:
        return found
    message = "promtool not found (apt-get install prometheus)"
    if os.environ.get("CI") == "true":
        pytest.fail(message)
    pytest.skip(message)


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


def test_queries_name_only_design_metrics():
    allowed = allowed_metrics()
    for where, q in dashboard_queries():
        names = metric_names(q)
        assert names, f"{where}: no metric in {q!r}"
        unknown = names - allowed.keys()
        assert not unknown, f"{where}: {sorted(unknown)} are not DESIGN.md §6 metrics"


def test_queries_use_only_existing_labels():
    allowed = allowed_metrics()
    for where, q in dashboard_queries():
        per_metric, grouping = used_labels(q)
        every = set().union(*(allowed[n] for n in metric_names(q))) | TARGET_LABELS | {"le"}
        for metric, labels in per_metric.items():
            extra = labels - allowed[metric] - TARGET_LABELS
            assert not extra, f"{where}: {metric} has no label(s) {sorted(extra)}"
        assert grouping <= every, f"{where}: grouping by unknown label(s) {sorted(grouping - every)}"


def test_alert_rules_name_only_design_metrics():
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


def test_design_md_section_6_matches_the_list_here():
    """DESIGN.md (../shared/ beside the repo) is the contract; this file's copy must agree."""
    candidates = [ROOT.parent / "shared" / "DESIGN.md", ROOT / "shared" / "DESIGN.md"]
    found = next((p for p in candidates if p.is_file()), None)
    if found is None:
        if os.environ.get("CI") == "true":
            pytest.fail("DESIGN.md not found beside the repository (../shared/DESIGN.md)")
        pytest.skip("DESIGN.md not found")
    text = found.read_text()
    section = text[text.index("## 6."):text.index("## 7.")]
    listed = {}
    for name, labels in re.findall(r"`(\w+)(?:\{([^}]*)\})?`", section):
        if name == "headwise_":
            continue
        labels = set(filter(None, (x.strip() for x in (labels or "").split(","))))
        listed["headwise_" + name] = labels
    expected = {n: labels for n, (_, labels) in DESIGN_METRICS.items()}
    assert listed == expected


def test_service_registers_every_design_metric():
    """service/metrics.py (the exporter) defines each §6 metric with its type and labels."""
    from prometheus_client.metrics import MetricWrapperBase

    from service.metrics import Metrics

    defined = {m._name: (m._type, set(m._labelnames))
               for m in vars(Metrics()).values() if isinstance(m, MetricWrapperBase)}
    for name, (kind, labels) in DESIGN_METRICS.items():
        base = name.removesuffix("_total") if kind == "counter" else name
        assert base in defined, f"service/metrics.py does not define {name}"
        assert defined[base] == (kind, labels), name


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
