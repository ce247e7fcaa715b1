"""Browser test of the viewer's Tag panel: the tokens, labels and scores shown are /v1/tag's, the
heatmap is the API's attention between the labelled tokens for the chosen layer and head, and
the encoder picker leaves the tagger out (it answers /v1/tag, not /v1/embed).

Headless Debian chromium through Playwright's `executable_path`, as tests/e2e/test_viewer.py; a
real `headwise serve` on a tiny embedding package and a tiny tagger built in the test."""

from __future__ import annotations

import base64
import shutil
from pathlib import Path

import httpx
import numpy as np
import pytest

REPO = Path(__file__).resolve().parents[2]
ARTIFACTS = REPO / "tests" / "e2e" / "artifacts"

pytestmark = [pytest.mark.slow, pytest.mark.timeout(300)]

TEXT = "Sarah Jessica Parker lives in Berkeley."


@pytest.fixture(scope="module")
def tg_server(start_server, tiny_package, tagger_package, tmp_path_factory):
    models = tmp_path_factory.mktemp("embed-and-tag")
    shutil.copytree(tiny_package, models / "tiny")
    shutil.copytree(tagger_package["models"] / "tiny-tagger", models / "tiny-tagger")
    return start_server(models=models)


@pytest.fixture
def page(open_viewer, tg_server):
    return open_viewer(tg_server.url, ready="() => document.body.dataset.tgState === 'idle'", height=900,
                       timeout=30_000)


def _on_screen(pg) -> dict:
    return pg.evaluate("""() => { const b = window.headwiseTag.block();
        return {...b, values: Array.from(b.values)}; }""")


def _pixel(pg, r: int, c: int) -> list[int]:
    return pg.evaluate("""([r, c]) => {
        const cv = document.querySelector('#tg-heat'), d = cv.dataset, cell = Number(d.cell);
        const x = Number(d.left) + (c + 0.5) * cell, y = Number(d.top) + (r + 0.5) * cell;
        return Array.from(cv.getContext('2d').getImageData(x, y, 1, 1).data);
    }""", [r, c])


def test_tag_view_shows_the_apis_labels_and_attention(page, tg_server):
    page.wait_for_function("() => document.querySelectorAll('#model option').length > 0")
    assert page.eval_on_selector_all("#model option", "os => os.map(o => o.value)") == ["tiny"]
    assert page.eval_on_selector_all("#tg-model option", "os => os.map(o => o.value)") == ["tiny-tagger"]
    page.fill("#tg-text", TEXT)
    page.click("#tg-run")
    page.wait_for_function("() => document.body.dataset.tgState === 'ready'", timeout=60_000)
    r = httpx.post(tg_server.url + "/v1/tag", timeout=60, json={
        "model": "tiny-tagger", "inputs": TEXT,
        "attention": {"layers": None, "heads": None, "dtype": "float16", "encoding": "base64"}})
    r.raise_for_status()
    item = r.json()["data"][0]
    shown = page.eval_on_selector_all("#tg-tokens button.tg-token", """bs => bs.map(b => ({
        index: Number(b.dataset.index), word: b.querySelector('.tg-word').textContent,
        label: b.querySelector('.tg-label').textContent, score: b.querySelector('.tg-score').textContent,
        marked: b.classList.contains('tg-entity')}))""")
    assert [(s["index"], s["word"], s["label"], s["score"]) for s in shown] == [
        (t["index"], t["token"], t["label"], f"{t['score']:.2f}") for t in item["tokens"]]
    assert [s["marked"] for s in shown] == [t["label"] != "O" for t in item["tokens"]]
    a = item["attention"]
    full = np.frombuffer(base64.b64decode(a["data"]), "<f2").astype(np.float32).reshape(a["shape"])
    at = [t["index"] for t in item["tokens"]]  # the labelled positions: [CLS] and [SEP] left out
    for layer, head in ((0, 0), (1, 1)):
        page.select_option("#tg-layer", str(layer))
        page.select_option("#tg-head", str(head))
        b = _on_screen(page)
        want = full[layer, head][np.ix_(at, at)]
        assert (b["layer"], b["head"], b["R"], b["C"]) == (a["layers"][layer], a["heads"][head], len(at), len(at))
        assert b["rows"] == b["cols"] == [t["token"] for t in item["tokens"]]
        np.testing.assert_array_equal(np.asarray(b["values"], np.float32).reshape(b["R"], b["C"]), want)
    heat = page.locator("#tg-heat")
    r, c = np.unravel_index(int(np.argmax(want)), want.shape)
    assert _pixel(page, int(r), int(c))[:3] == [8, 48, 107]  # the block's largest weight: the darkest cell
    heat.scroll_into_view_if_needed()
    box = heat.bounding_box()
    d = {k: float(heat.get_attribute(f"data-{k}")) for k in ("left", "top", "cell")}
    page.mouse.move(box["x"] + d["left"] + (c + 0.5) * d["cell"], box["y"] + d["top"] + (r + 0.5) * d["cell"])
    assert float(page.get_attribute("#tg-readout", "data-value")) == float(want[r, c])
    page.click("#tg-tokens button.tg-token >> nth=1")  # picking a token marks it
    assert page.get_attribute("#tg-tokens button.tg-token >> nth=1", "aria-pressed") == "true"
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    page.locator("#tg-section").screenshot(path=str(ARTIFACTS / "viewer-tag.png"))


def test_tag_errors_are_shown(page):
    page.fill("#tg-text", TEXT)  # a good run first
    page.click("#tg-run")
    page.wait_for_function("() => document.body.dataset.tgState === 'ready'", timeout=60_000)
    page.fill("#tg-text", "x" * 100_001)  # over HEADWISE_MAX_INPUT_CHARS
    page.click("#tg-run")
    page.wait_for_function("() => document.body.dataset.tgState === 'error'", timeout=30_000)
    assert "HTTP 413" in page.text_content("#tg-error") and "100001 characters" in page.text_content("#tg-error")
