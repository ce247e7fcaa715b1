"""Issue 8, fuzzing: schemathesis against the app's own OpenAPI schema, in-process (ASGI, the
fake backend) and against a live `headwise serve` with the `st run` CLI. Checks: no 5xx
(not_a_server_error), every status documented (status_code_conformance), every body as its
schema says (response_schema_conformance); 200 examples per operation at most (fewer where an
operation has fewer distinct inputs, e.g. no parameters at all)."""

from __future__ import annotations

import itertools
import re
import subprocess
import time
from pathlib import Path

import pytest
import schemathesis
from hypothesis import HealthCheck, given, settings
from hypothesis.errors import Unsatisfiable
from schemathesis.checks import not_a_server_error
from schemathesis.specs.openapi.checks import response_schema_conformance, status_code_conformance
from starlette.testclient import TestClient

from headwise.service.api.app import create_app
from headwise.service.settings import Settings
from tests.unit.fakes import FakeBackend, make_package

pytestmark = [pytest.mark.slow, pytest.mark.timeout(900)]

EXAMPLES = 200
CHECKS = [not_a_server_error, status_code_conformance, response_schema_conformance]
KEY = "fuzz-key-31337"
ST = Path(__file__).resolve().parents[2] / ".venv" / "bin" / "st"


class FuzzBackend(FakeBackend):
    """The fake backend, shifted one id up: its token 0 at position 0 makes a zero vector, which
    it then normalises to NaN (the real graphs clamp the norm)."""

    def run(self, role, feeds, outputs):
        return super().run(role, {**feeds, "input_ids": feeds["input_ids"] + 1}, outputs)


@pytest.fixture(scope="module")
def asgi(tmp_path_factory):
    pkg = make_package(tmp_path_factory.mktemp("fuzz") / "models")
    app = create_app(Settings(models_dir=pkg.parent, max_client_batch=16, api_key=KEY),
                     backend_factory=FuzzBackend)
    with TestClient(app, raise_server_exceptions=False) as client:
        deadline = time.monotonic() + 30
        while client.get("/health/ready").status_code != 200:
            assert time.monotonic() < deadline
            time.sleep(0.01)
        yield app, client


def test_in_process(asgi):
    app, client = asgi
    # from the dict, not from_asgi: that would start a second lifespan on the same app
    schema = schemathesis.openapi.from_dict(app.openapi())
    failures, counts = {}, {}
    for result, mode in itertools.product(list(schema.get_all_operations()), list(schemathesis.GenerationMode)):
        op = result.ok()
        seen: list = []

        @given(case=op.as_strategy(generation_mode=mode))
        @settings(max_examples=EXAMPLES, deadline=None, suppress_health_check=list(HealthCheck),
                  derandomize=True, database=None)
        def run(case):
            seen.append(1)  # noqa: B023
            kw = case.as_transport_kwargs(base_url="http://testserver",
                                          headers={"Authorization": f"Bearer {KEY}"})
            kw = {k: v for k, v in kw.items() if k in ("method", "url", "headers", "params", "json", "content", "data")}
            case.validate_response(client.request(**kw), checks=CHECKS)

        try:
            run()
        except Unsatisfiable:  # negative mode, nothing to break (no parameters, or free strings)
            pass
        except Exception as e:  # a check failed: report them all at the end
            failures[f"{op.label} {mode.value}"] = str(e)[:2000]
        counts[f"{op.label} {mode.value}"] = len(seen)
    print("\nin-process examples per operation:", counts)
    assert not failures, failures


def test_live_server_with_st_run(start_server):
    srv = start_server(env={"HEADWISE_PRECISION": "fp32", "HEADWISE_MAX_CLIENT_BATCH": "16", "HEADWISE_API_KEY": KEY})
    cmd = [str(ST), "run", srv.url + "/openapi.json", "--checks",
           "not_a_server_error,status_code_conformance,response_schema_conformance",
           "--max-examples", str(EXAMPLES), "--workers", "2", "--phases", "examples,fuzzing",
           "--seed", "8", "--generation-database", "none", "--no-color", "--request-timeout", "60",
           "-H", f"Authorization: Bearer {KEY}"]
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
    out = r.stdout + r.stderr
    m = re.search(r"(\d+) generated, (\d+) passed", out)
    print("\n" + "\n".join(out.splitlines()[-12:]))
    assert r.returncode == 0 and m and m.group(1) == m.group(2), out[-6000:]
    assert srv.proc.poll() is None
    assert "Traceback" not in srv.log_tail(10_000_000)
    srv.stop()
