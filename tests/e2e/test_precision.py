"""Exact by default, and the same answer whatever shares the batch (issue 15), against real
`headwise serve` processes on the real all-MiniLM-L6-v2: the default server (no precision
set) equals sentence-transformers, and every input's embedding and attention stay the same
alone and under concurrent load from other clients, for the default and for int8."""

from __future__ import annotations

import hashlib
import json
import random
import shutil
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np
import pytest

from tests.e2e.conftest import REPO, clean_env
from tests.integration.sentences import SENTENCES

pytestmark = [pytest.mark.slow, pytest.mark.timeout(900)]

PROBES = ["A man is playing a guitar.", "東京は日本の首都です。", "Emoji 🎉🚀 and symbols <>&%$#@!", "a",
          " ".join(["The attention mechanism weighs every token against every other token."] * 3)]
TOLERANCE = {"fp32": 1e-5, "int8": 1e-4}


@pytest.fixture(scope="module")
def default_server(start_server):
    return start_server()  # no HEADWISE_PRECISION: what `make run` serves


@pytest.fixture(scope="module")
def int8_server(start_server):
    return start_server(env={"HEADWISE_PRECISION": "int8"})


@pytest.fixture(scope="module")
def st_reference():
    from sentence_transformers import SentenceTransformer

    from headwise.model.sentence import default_checkpoint

    st = SentenceTransformer(str(default_checkpoint()), device="cpu")
    return st.encode(SENTENCES, convert_to_numpy=True, batch_size=8)


def embed(srv, texts, **extra) -> list:
    r = srv.post("/v1/embed", {"inputs": texts, **extra})
    assert r.status_code == 200, r.text
    return r.json()["data"]


def cosines(got: np.ndarray, want: np.ndarray) -> np.ndarray:
    return (got * want).sum(1) / np.linalg.norm(got, axis=1) / np.linalg.norm(want, axis=1)


def test_the_default_is_fp32_and_equals_sentence_transformers(default_server, st_reference):
    card = default_server.get("/v1/models").json()["data"][0]
    assert card["precision"] == "fp32"
    assert [v for v, spec in card["variants"].items() if spec["serving"]] == ["fast", "analysis"]
    got = np.array([d["embedding"] for d in embed(default_server, SENTENCES)])
    assert cosines(got, st_reference).min() >= 0.99999


def test_models_say_what_each_precision_costs_and_buys(default_server):
    variants = default_server.get("/v1/models").json()["data"][0]["variants"]
    q8 = variants["fast.int8"]
    assert "per-token" in q8["scheme"]
    assert q8["quality"]["passed"] and q8["quality"]["mean_cosine_to_fp32"] >= 0.998
    assert q8["quality"]["min_cosine_to_fp32"] >= 0.99 and q8["quality"]["batch_invariance"] <= 1e-4
    assert variants["fast"]["quality"]["batch_invariance"] <= 1e-5
    speed = q8["speed"]
    assert speed["cpu"] and {w["tokens"] for w in speed["workloads"]} == {20, 128}
    assert all(w["vs_fp32"] > 0 for w in speed["workloads"])


def test_int8_is_served_only_when_asked_and_meets_its_bar(int8_server, st_reference):
    card = int8_server.get("/v1/models").json()["data"][0]
    assert card["precision"] == "int8" and card["variants"]["fast.int8"]["serving"]
    got = np.array([d["embedding"] for d in embed(int8_server, SENTENCES)])
    assert cosines(got, st_reference).min() >= 0.99


def _under_load(srv, seconds_budget: int = 60) -> list[tuple[str, list, list | None]]:
    """16 clients at once: each sends batches of 1, 16 or 64 inputs (random lengths) with one
    probe somewhere inside, some asking for attention; returns (probe, embedding, attention)."""
    rng = random.Random(0)

    def client(k: int):
        out = []
        for j in range(4):
            probe = PROBES[(k + j) % len(PROBES)]
            size = (1, 16, 64)[(k + j) % 3]
            others = [rng.choice(SENTENCES) for _ in range(size - 1)]
            at = rng.randrange(size)
            batch = [*others[:at], probe, *others[at:]]
            wants_attention = (k + j) % 4 == 0
            extra = {"attention": {"layers": [0, 5], "heads": [0, 11]}} if wants_attention else {}
            d = embed(srv, batch, **extra)[at]
            out.append((probe, d["embedding"], d["attention"]["data"] if wants_attention else None))
        return out

    with ThreadPoolExecutor(16) as pool:
        return [r for rs in pool.map(client, range(16), timeout=seconds_budget) for r in rs]


@pytest.mark.parametrize("which", ["default", "int8"])
def test_an_input_gets_the_same_answer_whatever_shares_its_batch(request, which):
    srv = request.getfixturevalue(f"{which}_server")
    tol = TOLERANCE["fp32" if which == "default" else "int8"]
    alone = {p: embed(srv, [p])[0]["embedding"] for p in PROBES}
    # A request that asks for attention is answered by the attention graph, fp32 whatever the
    # embed precision: its embedding is compared with the same request made alone.
    alone_att = {p: embed(srv, [p], attention={"layers": [0, 5], "heads": [0, 11]})[0] for p in PROBES}
    results = _under_load(srv)
    assert len(results) == 64 and sum(att is not None for *_, att in results) == 16
    for probe, emb, att in results:
        if att is None:
            np.testing.assert_allclose(emb, alone[probe], rtol=0, atol=tol, err_msg=probe)
        else:
            want = alone_att[probe]
            np.testing.assert_allclose(emb, want["embedding"], rtol=0, atol=1e-5, err_msg=probe)
            np.testing.assert_allclose(np.array(att), np.array(want["attention"]["data"]), rtol=0, atol=1e-5,
                                       err_msg=probe)


def test_asking_for_a_missing_precision_stops_start_up_naming_the_variants(default_package, tmp_path):
    pkg = tmp_path / default_package.name
    shutil.copytree(default_package, pkg, ignore=shutil.ignore_patterns("fast.int8.onnx"))
    manifest = json.loads((pkg / "manifest.json").read_text())
    del manifest["variants"]["fast.int8"]
    (pkg / "manifest.json").write_text(json.dumps(manifest))
    r = subprocess.run([sys.executable, "-m", "headwise.cli", "serve", "--models", str(pkg), "--port", "0"],
                       cwd=REPO, env=clean_env(HEADWISE_PRECISION="int8"), capture_output=True, text=True,
                       timeout=120)
    assert r.returncode != 0
    assert "HEADWISE_PRECISION=int8" in r.stderr and "no fast.int8 variant" in r.stderr, r.stderr[-2000:]
    assert "fast (fp32)" in r.stderr and "analysis (fp32)" in r.stderr
    assert "Traceback" not in r.stderr


def test_cuda_that_cannot_be_had_stops_start_up_in_seconds_naming_why(default_package):
    """HEADWISE_PROVIDER=cuda on a machine without a GPU (the real onnxruntime-gpu wheel
    installed): exit 2 before serving, naming the missing driver and libraries."""
    if Path("/dev/nvidia0").exists():
        pytest.skip("this machine has a GPU: a CUDA session would succeed")
    t0 = time.monotonic()
    r = subprocess.run([sys.executable, "-m", "headwise.cli", "serve", "--models", str(default_package), "--port", "0"],
                       cwd=REPO, env=clean_env(HEADWISE_PROVIDER="cuda"), capture_output=True, text=True, timeout=120)
    took = time.monotonic() - t0
    assert r.returncode == 2, r.stderr[-2000:]
    assert "HEADWISE_PROVIDER=cuda, but CUDA cannot be used here" in r.stderr
    assert "libcuda.so.1" in r.stderr and "libcublas" in r.stderr, r.stderr[-2000:]
    assert "Traceback" not in r.stderr
    print(f"refused in {took:.1f} s")


def test_auto_on_a_machine_without_a_driver_says_cpu_in_one_info_line(start_server):
    """Issue 40, item 8: with no NVIDIA driver, `auto` choosing the CPU is the expected path: one
    INFO line and no WARNING (a driver that cannot be used keeps its WARNING: tests/unit/service/
    backends/test_cuda.py)."""
    from headwise.service.backends.cuda import driver_installed

    if Path("/dev/nvidia0").exists() or driver_installed():
        pytest.skip("this machine has an NVIDIA driver")
    srv = start_server(env={"HEADWISE_PROVIDER": "auto"})
    assert srv.get("/v1/models").json()["data"][0]["provider"] == "cpu"
    log = srv.log.read_text(errors="replace")
    said = [line for line in log.splitlines() if "HEADWISE_PROVIDER=auto" in line]
    assert len(said) == 1 and said[0].startswith("INFO") and "no NVIDIA driver" in said[0], log[-3000:]
    assert "WARNING" not in said[0] and "cannot be used here" not in log


def _broken_analysis_graph(default_package, tmp_path) -> Path:
    """The package with an analysis graph that onnxruntime cannot load (its sha256 matches the
    manifest, so the package itself loads)."""
    pkg = tmp_path / default_package.name
    shutil.copytree(default_package, pkg)
    (pkg / "analysis.onnx").write_bytes(b"not an onnx graph")
    manifest = json.loads((pkg / "manifest.json").read_text())
    manifest["variants"]["analysis"]["sha256"] = hashlib.sha256(b"not an onnx graph").hexdigest()
    (pkg / "manifest.json").write_text(json.dumps(manifest))
    return pkg


def test_a_model_that_cannot_be_prepared_stops_the_server_non_zero(default_package, tmp_path):
    """A graph that onnxruntime cannot load fails when the sessions are created (eagerly), after
    the server has bound: it must exit, not linger unready."""
    pkg = _broken_analysis_graph(default_package, tmp_path)
    r = subprocess.run([sys.executable, "-m", "headwise.cli", "serve", "--models", str(pkg), "--port", "0"],
                       cwd=REPO, env=clean_env(HEADWISE_PROVIDER="cpu", HEADWISE_ANALYSIS="eager"),
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 3, r.stderr[-2000:]
    assert "model start-up failed" in r.stderr and "analysis.onnx" in r.stderr, r.stderr[-2000:]
    assert "Traceback" not in r.stderr


@pytest.mark.parametrize("engine", ["inproc", "process"])
def test_an_analysis_graph_that_cannot_be_loaded_lazily_is_refused_and_plain_work_goes_on(
        start_server, default_package, tmp_path, engine):
    """HEADWISE_ANALYSIS=lazy (the default): the server starts; the first request that looks
    inside gets 503 naming the graph (not where it is: that is the log's), and so does every later
    one; plain work is answered."""
    pkg = _broken_analysis_graph(default_package, tmp_path)
    srv = start_server(models=pkg, env={"HEADWISE_ENGINE": engine,
                                        **({"HEADWISE_FRONTENDS": "1"} if engine == "process" else {})})
    for _ in range(2):
        r = srv.post("/v1/embed", json={"inputs": ["a cat"], "attention": {"layers": [0]}})
        assert r.status_code == 503, r.text
        message = r.json()["error"]["message"]
        assert "analysis graph (analysis.onnx) could not be loaded; see the server log" in message, r.text
        assert str(tmp_path) not in message  # the server's paths stay in its log
        assert srv.post("/v1/embed", json={"inputs": ["a cat"]}).status_code == 200
    assert srv.get("/health/ready").status_code == 200
