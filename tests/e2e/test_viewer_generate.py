"""Browser test of the viewer's Generate panel (issue #10): the decoder's causal heatmap is
lower-triangular (zeros above the diagonal, on screen too) and the encoder-decoder alignment
view is generated tokens × source tokens; both equal what /v1/generate returns.

Headless Debian chromium through Playwright's `executable_path`, as tests/e2e/test_viewer.py
(`playwright install` is never run); a real `headwise serve` on tiny random GPT-2 and Marian
packages built in the test."""

from __future__ import annotations

import base64
from pathlib import Path

import httpx
import numpy as np
import pytest

REPO = Path(__file__).resolve().parents[2]
ARTIFACTS = REPO / "tests" / "e2e" / "artifacts"

pytestmark = [pytest.mark.slow, pytest.mark.timeout(300)]




@pytest.fixture(scope="module")
def gen_server(start_server, tmp_path_factory):
    from headwise.export.package import build_package
    from tests.fixtures.tiny_generative import make_tiny_gpt2, make_tiny_marian

    ckpt = tmp_path_factory.mktemp("viewer-ckpt")
    out = tmp_path_factory.mktemp("viewer-models")
    build_package(make_tiny_gpt2(ckpt / "gpt2"), out, "tiny-gpt2", progress=lambda m: None)
    marian = make_tiny_marian(ckpt / "marian", n_layers=2, n_decoder_layers=3, init_std=0.05,
                              embedding_std=0.01, logits_bias_std=0.05)
    build_package(marian, out, "tiny-marian", progress=lambda m: None)
    return start_server(models=out)


@pytest.fixture
def page(open_viewer, gen_server):
    return open_viewer(gen_server.url, ready="() => document.body.dataset.genState === 'idle'", height=900,
                       timeout=30_000)


def _generate(pg, model: str, text: str, tokens: int) -> None:
    run = int(pg.evaluate("Number(document.body.dataset.genRun || 0)"))
    pg.select_option("#gen-model", model)
    pg.fill("#gen-text", text)
    pg.fill("#gen-max", str(tokens))
    pg.click("#gen-run")
    pg.wait_for_function("n => document.body.dataset.genState === 'ready' && Number(document.body.dataset.genRun) > n",
                         arg=run, timeout=60_000)


def _matrix(pg, which: str) -> tuple[np.ndarray, dict]:
    m = pg.evaluate(f"""() => {{
        const m = window.headwiseGenerate.state.{which};
        return {{L: m.L, H: m.H, R: m.R ?? m.T, C: m.C ?? m.T, values: Array.from(m.values), rows: m.rows, cols: m.cols}};
    }}""")
    return np.asarray(m["values"]).reshape(m["L"], m["H"], m["R"], m["C"]), m


def _pixel(pg, canvas: str, r: int, c: int) -> list[int]:
    return pg.evaluate("""([sel, r, c]) => {
        const cv = document.querySelector(sel), d = cv.dataset, cell = Number(d.cell);
        const x = Number(d.left) + (c + 0.5) * cell, y = Number(d.top) + (r + 0.5) * cell;
        return Array.from(cv.getContext('2d').getImageData(x, y, 1, 1).data);
    }""", [canvas, r, c])


def _api(srv, **body) -> dict:
    body["attention"] = {"layers": None, "heads": None, "dtype": "float32", "encoding": "base64"}
    r = httpx.post(srv.url + "/v1/generate", json=body, timeout=60)
    r.raise_for_status()
    return r.json()


def _arr(a: dict) -> np.ndarray:
    return np.frombuffer(base64.b64decode(a["data"]), "<f4").reshape(a["shape"])


def test_causal_heatmap_is_lower_triangular(page, gen_server):
    assert page.is_hidden("#run-form")  # no encoder model on this server: only the Generate panel
    _generate(page, "tiny-gpt2", "the quick brown fox", 10)
    causal, m = _matrix(page, "causal")
    api = _api(gen_server, model="tiny-gpt2", prompt="the quick brown fox", max_new_tokens=10)
    P, N = len(api["prompt"]["ids"]), len(api["ids"])
    T = P + N - 1
    assert causal.shape[2:] == (T, T) and m["rows"] == api["prompt"]["tokens"] + api["tokens"][:-1]
    above = np.triu(np.ones((T, T), bool), 1)
    assert np.all(causal[:, :, above] == 0)
    np.testing.assert_allclose(causal.sum(-1), 1, atol=1e-5)
    for i, step in enumerate(api["attention"]["steps"]):  # each step's row, as the API gave it
        np.testing.assert_allclose(causal[:, :, P - 1 + i, : P + i], _arr(step["self_attention"])[:, :, 0], atol=1e-6)
    # on screen: above the diagonal is blank, the first token's weight on itself (1) is coloured
    assert int(page.get_attribute("#gen-causal", "data-rows")) == T
    assert _pixel(page, "#gen-causal", 0, T - 1)[:3] == [255, 255, 255]
    assert _pixel(page, "#gen-causal", 1, 2)[:3] == [255, 255, 255]
    assert _pixel(page, "#gen-causal", 0, 0)[:3] != [255, 255, 255]
    assert page.is_hidden("#gen-align-fig")
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    page.locator("#gen-section").screenshot(path=str(ARTIFACTS / "viewer-generate-gpt2.png"))


def test_alignment_view_is_generated_by_source(page, gen_server):
    _generate(page, "tiny-marian", "the cat sat on the mat", 8)
    align, m = _matrix(page, "align")
    api = _api(gen_server, model="tiny-marian", source="the cat sat on the mat", max_new_tokens=8)
    S, N = len(api["source"]["ids"]), len(api["ids"])
    assert align.shape == (3, 2, N, S)  # layers × heads × generated tokens × source tokens
    assert m["rows"] == api["tokens"] and m["cols"] == api["source"]["tokens"]
    for i, step in enumerate(api["attention"]["steps"]):
        np.testing.assert_allclose(align[:, :, i], _arr(step["cross_attention"])[:, :, 0], atol=1e-6)
    np.testing.assert_allclose(align.sum(-1), 1, atol=1e-5)
    assert (int(page.get_attribute("#gen-align", "data-rows")), int(page.get_attribute("#gen-align", "data-cols"))) == (N, S)
    causal, _ = _matrix(page, "causal")
    assert causal.shape[2:] == (N, N) and np.all(causal[:, :, np.triu(np.ones((N, N), bool), 1)] == 0)
    page.select_option("#gen-layer", "2")
    page.select_option("#gen-head", "1")
    assert page.is_visible("#gen-align-fig")
    page.locator("#gen-section").screenshot(path=str(ARTIFACTS / "viewer-generate-marian.png"))
