"""Browser test of the viewer's Fill panel: the fills and probabilities shown at each mask are
/v1/fill_mask's, the heatmap is the API's attention between every token /v1/tokenize names for
the chosen layer and head, the picked mask's row is outlined, and the encoder picker leaves the
masked language model out (it answers /v1/fill_mask, not /v1/embed).

Headless Debian chromium through Playwright's `executable_path`, as tests/e2e/test_viewer.py; a
real `headwise serve` on a tiny embedding package and a tiny random BertForMaskedLM package."""

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

TEXT = "the cat sat on the [MASK] mat, and the [MASK] ran."


@pytest.fixture(scope="module")
def fm_server(start_server, tiny_package, tmp_path_factory):
    from tests.fixtures.tiny import make_fill_mask_package

    mlm = make_fill_mask_package(tmp_path_factory.mktemp("fill"))
    models = tmp_path_factory.mktemp("embed-and-fill")
    shutil.copytree(tiny_package, models / "tiny")
    shutil.copytree(mlm["models"] / "tiny-mlm", models / "tiny-mlm")
    return start_server(models=models)


@pytest.fixture
def page(open_viewer, fm_server):
    return open_viewer(fm_server.url, ready="() => document.body.dataset.fmState === 'idle'", height=900,
                       timeout=30_000)


def _on_screen(pg) -> dict:
    return pg.evaluate("""() => { const b = window.headwiseFill.block();
        return {...b, values: Array.from(b.values)}; }""")


def test_fill_view_shows_the_apis_fills_and_attention(page, fm_server):
    page.wait_for_function("() => document.querySelectorAll('#model option').length > 0")
    assert page.eval_on_selector_all("#model option", "os => os.map(o => o.value)") == ["tiny"]
    assert page.eval_on_selector_all("#fm-model option", "os => os.map(o => o.value)") == ["tiny-mlm"]
    assert "[MASK]" in page.input_value("#fm-text")  # the example names the model's mask token
    page.fill("#fm-text", TEXT)
    page.click("#fm-run")
    page.wait_for_function("() => document.body.dataset.fmState === 'ready'", timeout=60_000)
    r = httpx.post(fm_server.url + "/v1/fill_mask", timeout=60, json={
        "model": "tiny-mlm", "inputs": TEXT, "top_k": 5,
        "attention": {"layers": None, "heads": None, "dtype": "float16", "encoding": "base64"}})
    r.raise_for_status()
    item = r.json()["data"][0]
    tokens = httpx.post(fm_server.url + "/v1/tokenize", timeout=60,
                        json={"model": "tiny-mlm", "inputs": TEXT}).json()["data"][0]["tokens"]
    shown = page.eval_on_selector_all("#fm-masks .fm-mask", """ms => ms.map(m => ({
        position: Number(m.dataset.position),
        fills: Array.from(m.querySelectorAll('li')).map(li => [li.querySelector('.fm-token').textContent,
                                                                li.querySelector('.fm-score').textContent])}))""")
    assert shown == [{"position": m["position"], "fills": [[f["token_str"], f"{f['score']:.4f}"] for f in m["fills"]]}
                     for m in item["masks"]]
    assert len(shown) == 2 and len(shown[0]["fills"]) == 5
    a = item["attention"]
    full = np.frombuffer(base64.b64decode(a["data"]), "<f2").astype(np.float32).reshape(a["shape"])
    for layer, head in ((0, 0), (1, 1)):
        page.select_option("#fm-layer", str(layer))
        page.select_option("#fm-head", str(head))
        b = _on_screen(page)
        assert (b["layer"], b["head"], b["R"], b["C"]) == (a["layers"][layer], a["heads"][head], len(tokens), len(tokens))
        assert b["rows"] == b["cols"] == tokens and tokens[0] == "[CLS]"
        np.testing.assert_array_equal(np.asarray(b["values"], np.float32).reshape(b["R"], b["C"]), full[layer, head])
    assert page.get_attribute("#fm-heat", "data-mark") == str(item["masks"][0]["position"])
    page.click("#fm-masks button.fm-pick >> nth=1")  # the second mask's row is outlined
    assert page.get_attribute("#fm-heat", "data-mark") == str(item["masks"][1]["position"])
    assert page.get_attribute("#fm-masks button.fm-pick >> nth=1", "aria-pressed") == "true"
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    page.locator("#fm-section").screenshot(path=str(ARTIFACTS / "viewer-fill.png"))


def test_fill_errors_are_shown(page):
    page.fill("#fm-text", "no mask in this text")
    page.click("#fm-run")
    page.wait_for_function("() => document.body.dataset.fmState === 'error'", timeout=30_000)
    assert "HTTP 422" in page.text_content("#fm-error") and "[MASK]" in page.text_content("#fm-error")
