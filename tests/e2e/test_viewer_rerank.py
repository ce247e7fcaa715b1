"""Browser test of the viewer's Rerank panel (issue 21): the documents' order and scores are
/v1/rerank's, and the heatmap on screen is the query↔document block the API returns for the
chosen document, layer, head and direction.

Headless Debian chromium through Playwright's `executable_path`, as tests/e2e/test_viewer.py
(`playwright install` is never run); a real `headwise serve` on the tiny classification packages
built in the test."""

from __future__ import annotations

import base64
from pathlib import Path

import httpx
import numpy as np
import pytest

REPO = Path(__file__).resolve().parents[2]
ARTIFACTS = REPO / "tests" / "e2e" / "artifacts"

pytestmark = [pytest.mark.slow, pytest.mark.timeout(300)]

QUERY = "where did the cat sit"
DOCS = ["the cat sat on the mat", "a dog", "the quick brown fox jumps over the lazy dog"]


@pytest.fixture(scope="module")
def rr_server(start_server, classifier_packages):
    return start_server(models=classifier_packages["models"])


@pytest.fixture
def page(open_viewer, rr_server):
    return open_viewer(rr_server.url, ready="() => document.body.dataset.rrState === 'idle'", height=900,
                       timeout=30_000)


def _rerank(pg, query: str, docs: list[str]) -> None:
    run = int(pg.evaluate("Number(document.body.dataset.rrRun || 0)"))
    pg.fill("#rr-query", query)
    pg.fill("#rr-docs", "\n".join(docs))
    pg.click("#rr-run")
    pg.wait_for_function("n => document.body.dataset.rrState === 'ready' && Number(document.body.dataset.rrRun) > n",
                         arg=run, timeout=60_000)


def _api(srv) -> dict:
    r = httpx.post(srv.url + "/v1/rerank", timeout=60, json={
        "model": "tiny-reranker", "query": QUERY, "texts": DOCS, "return_text": True,
        "attention": {"layers": None, "heads": None, "dtype": "float16", "encoding": "base64"}})
    r.raise_for_status()
    return r.json()


def _block(a: dict, which: str) -> np.ndarray:
    m = a[which]
    return np.frombuffer(base64.b64decode(m["data"]), "<f2").astype(np.float32).reshape(m["shape"])


def _on_screen(pg) -> dict:
    return pg.evaluate("""() => { const b = window.headwiseRerank.block();
        return {...b, values: Array.from(b.values)}; }""")


def _pixel(pg, r: int, c: int) -> list[int]:
    return pg.evaluate("""([r, c]) => {
        const cv = document.querySelector('#rr-heat'), d = cv.dataset, cell = Number(d.cell);
        const x = Number(d.left) + (c + 0.5) * cell, y = Number(d.top) + (r + 0.5) * cell;
        return Array.from(cv.getContext('2d').getImageData(x, y, 1, 1).data);
    }""", [r, c])


def test_rerank_view_shows_the_apis_scores_and_attention(page, rr_server):
    # only the cross-encoder is offered (the 3-label classifier cannot rerank); no embedding model here
    assert page.eval_on_selector_all("#rr-model option", "os => os.map(o => o.value)") == ["tiny-reranker"]
    assert page.is_hidden("#run-form")
    _rerank(page, QUERY, DOCS)
    api = _api(rr_server)
    shown = page.eval_on_selector_all("#rr-results button.rr-doc", """bs => bs.map(b => ({
        index: Number(b.dataset.index), score: b.querySelector('.rr-score').textContent,
        text: b.querySelector('.rr-text').textContent}))""")
    assert [s["index"] for s in shown] == [r["index"] for r in api["results"]]
    assert [s["score"] for s in shown] == [f"{r['score']:.4f}" for r in api["results"]]
    assert [s["text"] for s in shown] == [DOCS[r["index"]] for r in api["results"]]
    # the first (best) document, layer 0, head 0, query → document: the API's block
    best = api["results"][0]["attention"]
    b = _on_screen(page)
    want = _block(best, "query_to_document")[0, 0]
    assert b["rows"] == best["query"]["tokens"] and b["cols"] == best["document"]["tokens"]
    np.testing.assert_array_equal(np.asarray(b["values"], np.float32).reshape(b["R"], b["C"]), want)
    # another document, layer and head, and the other direction
    page.click("#rr-results li:nth-child(3) button")
    page.select_option("#rr-layer", "1")
    page.select_option("#rr-head", "1")
    page.select_option("#rr-dir", "dq")
    third = api["results"][2]["attention"]
    b = _on_screen(page)
    want = _block(third, "document_to_query")[1, 1]
    assert (b["index"], b["layer"], b["head"]) == (api["results"][2]["index"], 1, 1)
    assert b["rows"] == third["document"]["tokens"] and b["cols"] == third["query"]["tokens"]
    np.testing.assert_array_equal(np.asarray(b["values"], np.float32).reshape(b["R"], b["C"]), want)
    heat = page.locator("#rr-heat")
    assert (int(heat.get_attribute("data-rows")), int(heat.get_attribute("data-cols"))) == want.shape
    assert heat.get_attribute("data-dir") == "dq" and int(heat.get_attribute("data-index")) == b["index"]
    # on screen: the block's largest weight is the darkest cell, deep blue, not white
    r, c = np.unravel_index(int(np.argmax(want)), want.shape)
    assert _pixel(page, int(r), int(c))[:3] == [8, 48, 107]
    # the readout under the cursor gives that weight
    box = heat.bounding_box()
    d = {k: float(heat.get_attribute(f"data-{k}")) for k in ("left", "top", "cell")}
    page.mouse.move(box["x"] + d["left"] + (c + 0.5) * d["cell"], box["y"] + d["top"] + (r + 0.5) * d["cell"])
    assert float(page.get_attribute("#rr-readout", "data-value")) == float(want[r, c])
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    page.locator("#rr-section").screenshot(path=str(ARTIFACTS / "viewer-rerank.png"))


def test_rerank_errors_are_shown(page):
    _rerank(page, QUERY, DOCS)  # a good run first
    run = int(page.evaluate("Number(document.body.dataset.rrRun || 0)"))
    page.fill("#rr-docs", "")
    page.click("#rr-run")
    page.wait_for_function("() => document.body.dataset.rrState === 'error'", timeout=30_000)
    assert "HTTP 400" in page.text_content("#rr-error") and "'texts' is empty" in page.text_content("#rr-error")
    assert int(page.evaluate("Number(document.body.dataset.rrRun || 0)")) == run
