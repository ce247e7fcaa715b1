"""docker/prometheus/: promtool check config, check rules and test rules (issue 7)."""

from __future__ import annotations

import subprocess
from pathlib import Path

import yaml

from tests.fixtures.programs import require_program

ROOT = Path(__file__).resolve().parents[3]
PROM = ROOT / "docker" / "prometheus"
CONFIG = PROM / "prometheus.yml"
RULES = PROM / "alerts.yml"
RULE_TESTS = PROM / "tests" / "alerts_test.yml"
REQUIRED_ALERTS = {
    "HeadwiseHighErrorRatio",
    "HeadwiseLatencySLOBreach",
    "HeadwiseQueueSaturated",
    "HeadwiseInstanceDown",
    "HeadwiseHeadEntropyDrift",
}


def _promtool() -> str:
    """promtool (Debian's prometheus package, .ci/system-deps.sh); CI=true fails without it."""
    return require_program("promtool", "apt-get install prometheus")


def _run(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([_promtool(), *args], capture_output=True, text=True, timeout=120, cwd=ROOT)


def test_check_config():
    res = _run("check", "config", str(CONFIG))
    assert res.returncode == 0, res.stdout + res.stderr
    assert "SUCCESS" in res.stdout + res.stderr


def test_check_rules():
    res = _run("check", "rules", str(RULES))
    assert res.returncode == 0, res.stdout + res.stderr


def test_rule_unit_tests_pass():
    res = _run("test", "rules", str(RULE_TESTS))
    assert res.returncode == 0, res.stdout + res.stderr
    assert "SUCCESS" in res.stdout


def test_promtool_test_rules_would_catch_a_wrong_expectation(tmp_path):
    """The unit tests are really compared: a changed expected label makes them fail."""
    tests = yaml.safe_load(RULE_TESTS.read_text())
    tests["rule_files"] = [str(RULES)]
    for t in tests["tests"]:
        for a in t.get("alert_rule_test", []):
            for exp in a.get("exp_alerts", []):
                exp["exp_labels"]["severity"] = "nonsense"
    bad = tmp_path / "bad_test.yml"
    bad.write_text(yaml.safe_dump(tests))
    assert _run("test", "rules", str(bad)).returncode != 0


def test_every_alert_is_required_and_fired_by_a_unit_test():
    groups = yaml.safe_load(RULES.read_text())["groups"]
    alerts = {r["alert"] for g in groups for r in g["rules"] if "alert" in r}
    assert alerts >= REQUIRED_ALERTS
    for g in groups:
        for r in g["rules"]:
            if "alert" in r:
                assert r["labels"]["severity"] in {"page", "warn"}
                assert r["annotations"]["summary"] and r["annotations"]["description"]
                assert r.get("for"), f"{r['alert']}: no `for:`, it would fire on a blip"
    fired, quiet = set(), set()
    for t in yaml.safe_load(RULE_TESTS.read_text())["tests"]:
        for a in t.get("alert_rule_test", []):
            (fired if a["exp_alerts"] else quiet).add(a["alertname"])
    assert alerts <= fired, f"alerts never fired by a test: {alerts - fired}"
    assert alerts <= quiet, f"alerts never shown quiet by a test: {alerts - quiet}"


def test_config_loads_the_rules_and_scrapes_headwise():
    cfg = yaml.safe_load(CONFIG.read_text())
    assert [(CONFIG.parent / f).resolve() for f in cfg["rule_files"]] == [RULES.resolve()]
    (job,) = [j for j in cfg["scrape_configs"] if j["job_name"] == "headwise"]
    assert job.get("metrics_path", "/metrics") == "/metrics"
    (dns,) = job["dns_sd_configs"]
    assert "headwise" in dns["names"] and dns["port"] == 8000
    # The compose service names it resolves exist.
    compose = yaml.safe_load((ROOT / "docker" / "compose.yaml").read_text())
    assert set(dns["names"]) <= compose["services"].keys()
