"""Browser tests of the attention viewer at `GET /` (issue #6).

Headless Debian chromium driven by Playwright for Python (sync API) through `executable_path`;
`playwright install` is never run. Every test talks to a real `headwise serve` process on a
loopback port, serving the real default model package, and compares what the page shows with
what the API returns.

Screenshots go to tests/e2e/artifacts/ (git-ignored). docs/img/viewer.png, the README's
picture, is written when it is missing or when HEADWISE_UPDATE_DOCS_IMG=1.
"""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path
from urllib.parse import urlsplit

import httpx
import numpy as np
import pytest

from tests.e2e.conftest import foreign_requests
from tests.fixtures.viewer import api_attention, hover_cell, shot, show, wait_ready

REPO = Path(__file__).resolve().parents[2]
DOCS_IMG = REPO / "docs" / "img" / "viewer.png"
SENTENCE = "Headwise shows what every attention head looks at, unbelievably."
SPECIAL = {"[CLS]", "[SEP]", "<s>", "</s>"}  # as in headwise/service/static/embed.js
F16_ATOL = 1e-3  # float16 keeps 11 significant bits: |error| <= 2**-11 for weights <= 1

pytestmark = [pytest.mark.slow, pytest.mark.timeout(300)]


# ---------------------------------------------------------------- server
# `server` (session, one fp32 CPU `headwise serve` on the real default package) and
# `start_server` (a factory for servers with other settings) come from tests/e2e/conftest.py,
# as do `browser` (Debian's chromium through Playwright) and `open_viewer`.


# ---------------------------------------------------------------- page

@pytest.fixture
def page(open_viewer, server):
    """A fresh page at 1280×800 that has loaded the viewer (tests/e2e/conftest.py's `open_viewer`:
    it fails if the page ever raised a JavaScript error or requested another host)."""
    return open_viewer(server.url, accept_downloads=True)


# ---------------------------------------------------------------- tests

def test_token_list_matches_tokenize(page, server):
    show(page, SENTENCE)
    r = httpx.post(f"{server.url}/v1/tokenize", json={"inputs": SENTENCE}, timeout=30)
    r.raise_for_status()
    want = r.json()["data"][0]
    shown = page.eval_on_selector_all(
        "#tokens-0 li", "els => els.map(e => [e.dataset.token, +e.dataset.start, +e.dataset.end])")
    assert [s[0] for s in shown] == want["tokens"]
    assert [[s[1], s[2]] for s in shown] == [list(o) for o in want["offsets"]]
    assert any(t.startswith("##") for t in want["tokens"]), "the sentence should split a word"
    # the head view's token columns are the same tokens
    cols = page.eval_on_selector_all("#head-view .hv-q .hv-tok", "els => els.map(e => e.textContent)")
    assert cols == want["tokens"]
    shot(page, "viewer-head-1280x800")


def test_offsets_are_code_points(page, server):
    """The API's offsets index Unicode code points; the page must not read them as UTF-16 units."""
    text = "😀 naïve café 🚀 rocket"
    show(page, text)
    want = httpx.post(f"{server.url}/v1/tokenize", json={"inputs": text}, timeout=30).json()["data"][0]
    titles = page.eval_on_selector_all("#tokens-0 li", "els => els.map(e => e.title)")
    assert len(titles) == len(want["tokens"])
    for title, (s, e) in zip(titles, want["offsets"], strict=True):
        if e > s:
            assert f"“{text[s:e]}”" in title, title


def test_heatmap_values_equal_api(page, server):
    show(page, SENTENCE)
    [(item, att)] = api_attention(server, [SENTENCE], dtype="float32")
    T = len(item["tokens"])
    layer, head = 3, 7
    page.select_option("#layer", str(layer))
    page.select_option("#heat-head", str(head))
    canvas = page.locator("#heatmap")
    assert canvas.get_attribute("data-layer") == str(layer)
    assert canvas.get_attribute("data-head") == str(head)
    readout = page.locator("#heatmap-readout")
    cells = [(0, 0), (2, 5), (T - 1, 0), (T // 2, T - 1), (5, 4)]
    for q, k in cells:
        hover_cell(page, q, k)
        assert readout.get_attribute("data-query") == str(q)
        assert readout.get_attribute("data-key") == str(k)
        assert readout.get_attribute("data-layer") == str(layer)
        assert readout.get_attribute("data-head") == str(head)
        want = att[layer, head, q, k]
        got = float(readout.get_attribute("data-value"))
        assert got == pytest.approx(want, abs=F16_ATOL, rel=2**-10), (q, k)
        shown = float(readout.locator(".value").inner_text())  # the number a person reads
        assert shown == pytest.approx(want, abs=F16_ATOL, rel=2**-10), (q, k)
    # keyboard: focus the heatmap and move the cursor with the arrow keys
    canvas.focus()
    page.keyboard.press("ArrowRight")
    page.keyboard.press("ArrowDown")
    q, k = cells[-1][0] + 1, cells[-1][1] + 1
    assert readout.get_attribute("data-query") == str(q)
    assert readout.get_attribute("data-key") == str(k)
    assert float(readout.get_attribute("data-value")) == pytest.approx(att[layer, head, q, k], abs=F16_ATOL)


def test_model_view_click_opens_head(page):
    show(page, SENTENCE)
    page.click("#tab-model")
    cells = page.locator("#model-view .mv-cell")
    assert cells.count() == 6 * 12
    shot(page, "viewer-model-1280x800")
    page.click("#model-view .mv-cell[data-layer='4'][data-head='9']")
    assert page.get_attribute("#tab-head", "aria-selected") == "true"
    assert page.is_visible("#panel-head") and not page.is_visible("#panel-model")
    hv = page.locator("#head-view")
    assert hv.get_attribute("data-layer") == "4"
    assert hv.get_attribute("data-heads") == "9"
    assert page.input_value("#layer") == "4"
    assert page.input_value("#heat-head") == "9"
    checked = page.eval_on_selector_all("#head-checks input:checked", "els => els.map(e => e.value)")
    assert checked == ["9"]
    assert page.get_attribute("#heatmap", "data-layer") == "4"
    assert page.get_attribute("#heatmap", "data-head") == "9"
    caption = page.inner_text("#head-caption")
    assert "Layer 4" in caption and "head 9" in caption

    # the same by keyboard: arrows move in the grid, Enter opens
    page.click("#tab-model")
    page.focus("#model-view .mv-cell[data-layer='4'][data-head='9']")
    for key in ("ArrowUp", "ArrowUp", "ArrowLeft", "ArrowLeft", "ArrowLeft", "Enter"):
        page.keyboard.press(key)
    assert hv.get_attribute("data-layer") == "2"
    assert hv.get_attribute("data-heads") == "6"


def _numpy_summary(A: np.ndarray, tokens: list[str]) -> dict[tuple[int, int], dict[str, float]]:
    """The definitions of the page's help text, in numpy."""
    L, H, T, _ = A.shape
    q = np.arange(T)[:, None]
    k = np.arange(T)[None, :]
    special = np.array([t in SPECIAL for t in tokens])
    out = {}
    for layer in range(L):
        for head in range(H):
            a = A[layer, head]
            with np.errstate(divide="ignore", invalid="ignore"):
                plogp = np.where(a > 0, a * np.log2(np.where(a > 0, a, 1)), 0.0)
            out[layer, head] = {
                "entropy": float(np.mean(-plogp.sum(axis=1))),
                "special": float(np.mean(a[:, special].sum(axis=1))),
                "distance": float(np.mean((a * np.abs(q - k)).sum(axis=1))),
                "prev": float(np.mean(np.diagonal(a, offset=-1))),
                "next": float(np.mean(np.diagonal(a, offset=1))),
            }
    return out


def test_summary_equals_numpy(page, server):
    show(page, SENTENCE)
    [(item, att)] = api_attention(server, [SENTENCE], dtype="float16")
    want = _numpy_summary(att, item["tokens"])
    page.click("#tab-summary")
    rows = page.eval_on_selector_all("#summary tbody tr", """trs => trs.map(tr => ({
        layer: +tr.dataset.layer, head: +tr.dataset.head,
        values: Object.fromEntries([...tr.querySelectorAll('td[data-key]')].map(td => [td.dataset.key, +td.dataset.value])),
        shown: Object.fromEntries([...tr.querySelectorAll('td[data-key]')].map(td => [td.dataset.key, +td.textContent])),
    }))""")
    assert len(rows) == len(want) == 72
    for row in rows:
        expect = want[row["layer"], row["head"]]
        for key, value in expect.items():
            assert row["values"][key] == pytest.approx(value, abs=1e-3), (row["layer"], row["head"], key)
            assert row["shown"][key] == pytest.approx(value, abs=6e-3), (row["layer"], row["head"], key)

    # sorting: first click on a statistic sorts descending, the second ascending
    page.click("#summary button.sort[data-key='entropy']")
    assert page.get_attribute("#summary th:nth-child(3)", "aria-sort") == "descending"
    ent = page.eval_on_selector_all("#summary td[data-key='entropy']", "t => t.map(x => +x.dataset.value)")
    assert ent == sorted(ent, reverse=True)
    page.click("#summary button.sort[data-key='entropy']")
    ent = page.eval_on_selector_all("#summary td[data-key='entropy']", "t => t.map(x => +x.dataset.value)")
    assert ent == sorted(ent)
    page.click("#summary button.sort[data-key='prev']")
    top = page.locator("#summary tbody tr").first
    best = max(want, key=lambda lh: want[lh]["prev"])
    assert (int(top.get_attribute("data-layer")), int(top.get_attribute("data-head"))) == best
    shot(page, "viewer-summary-1280x800")
    # a head's button opens it in the head view
    top.locator("button.open").click()
    assert page.get_attribute("#head-view", "data-layer") == str(best[0])
    assert page.get_attribute("#head-view", "data-heads") == str(best[1])


def test_hover_isolates_a_tokens_lines(page, server):
    show(page, SENTENCE)
    [(item, att)] = api_attention(server, [SENTENCE], dtype="float32")
    page.select_option("#layer", "1")
    page.click("#heads-none")
    page.check("#head-4")
    q = 3
    page.hover(f"#head-view .hv-q .hv-tok[data-index='{q}']")
    assert "iso" in page.get_attribute(f"#head-view .hv-q .hv-tok[data-index='{q}']", "class")
    # each key token now carries the weight query q gives it, in its tooltip
    for k in (0, 2, len(item["tokens"]) - 1):
        title = page.get_attribute(f"#head-view .hv-k .hv-tok[data-index='{k}']", "title")
        got = float(title.split("head 4:")[1].split()[0])
        assert got == pytest.approx(att[1, 4, q, k], abs=F16_ATOL)
    # focus does the same from the keyboard; Arrow keys move between tokens
    page.focus("#head-view .hv-k .hv-tok[data-index='0']")
    page.keyboard.press("ArrowDown")
    assert page.evaluate("document.activeElement.dataset.index") == "1"
    assert "iso" in page.get_attribute("#head-view .hv-k .hv-tok[data-index='1']", "class")


def test_compare_two_sentences_and_exports(page, server):
    first, second = "The bank raised interest rates.", "We sat on the river bank."
    show(page, first, second)
    results = api_attention(server, [first, second])
    for i, (item, _) in enumerate(results):
        shown = page.eval_on_selector_all(f"#tokens-{i} li", "els => els.map(e => e.dataset.token)")
        assert shown == item["tokens"]
    page.check("#sentence-pick input[value='1']")
    assert page.get_attribute("#head-view", "data-sentence") == "B"
    assert page.eval_on_selector_all("#head-view .hv-q .hv-tok", "e => e.length") == len(results[1][0]["tokens"])

    with page.expect_download() as dl:
        page.click("#export-json")
    doc = json.loads(Path(dl.value.path()).read_text())
    assert [s["tokens"] for s in doc["sentences"]] == [it["tokens"] for it, _ in results]
    for s, (_, att) in zip(doc["sentences"], results, strict=True):
        got = np.array(s["attention"]["data"])
        assert got.shape == att.shape == tuple(s["attention"]["shape"])
        np.testing.assert_allclose(got, att, atol=F16_ATOL)
        # written with 5 significant digits: each value still recovers a float16 exactly
        recovered = got.astype(np.float16)
        assert np.all(np.abs(recovered.astype(np.float64) - got) <= np.abs(got) * 5e-5 + 1e-12)
        assert float(np.abs(recovered.astype(np.float64) - att).max()) <= F16_ATOL

    for tab in ("head", "model", "summary"):
        page.click(f"#tab-{tab}")
        with page.expect_download() as dl:
            page.click("#export-png")
        data = Path(dl.value.path()).read_bytes()
        assert data[:8] == b"\x89PNG\r\n\x1a\n", tab
        assert dl.value.suggested_filename.endswith(".png")


def test_no_request_leaves_the_server(page, server):
    """Everything the page loads or calls is on the server's own origin, whatever the user does."""
    show(page, SENTENCE, "A second sentence.")
    for tab in ("model", "summary", "head"):
        page.click(f"#tab-{tab}")
    page.click("#help summary")
    with page.expect_download():
        page.click("#export-png")
    assert page.requests, "the page made no request at all?"
    assert foreign_requests(page.requests, server.url) == []
    paths = {urlsplit(u).path for u in page.requests if urlsplit(u).scheme.startswith("http")}
    assert {"/", "/static/app.js", "/static/style.css", "/v1/models", "/v1/embed"} <= paths
    # the page and its assets (app.js's modules included) name no other host either
    modules = {f"/static/{p.name}" for p in (REPO / "headwise" / "service" / "static").glob("*.js")}
    assert len(modules) > 10, "the static folder moved? no modules found"
    assert modules <= paths, modules - paths  # every module loaded, none left out of the page
    for asset in ("/", "/static/style.css", *sorted(modules)):
        r = httpx.get(server.url + asset, timeout=10)
        assert "http://" not in r.text and "https://" not in r.text, asset
        if asset.endswith(".js"):  # a module under nosniff runs only with a JavaScript type
            assert r.headers["content-type"].split(";")[0] in ("text/javascript", "application/javascript"), asset


def test_controls_are_labelled_and_keyboard_reachable(page):
    unlabelled = page.evaluate("""() => [...document.querySelectorAll('input, select, textarea, button, canvas[tabindex]')]
        .filter(e => e.offsetParent !== null)
        .filter(e => !((e.labels && e.labels.length) || e.getAttribute('aria-label') || e.getAttribute('aria-labelledby')
                       || (e.tagName === 'BUTTON' && e.textContent.trim())))
        .map(e => e.outerHTML.slice(0, 80))""")
    assert unlabelled == []
    # tabs move with arrow keys
    page.focus("#tab-head")
    page.keyboard.press("ArrowRight")
    assert page.get_attribute("#tab-model", "aria-selected") == "true"
    page.keyboard.press("ArrowRight")
    assert page.get_attribute("#tab-summary", "aria-selected") == "true"
    # Ctrl+Enter in the text box runs the model
    run = int(page.evaluate("document.body.dataset.run"))
    page.fill("#text-a", "Keyboard only.")
    page.focus("#text-a")
    page.keyboard.press("Control+Enter")
    wait_ready(page, run)
    assert page.eval_on_selector_all("#tokens-0 li", "e => e.map(x => x.dataset.token)")[1:3] == ["keyboard", "only"]


def test_readme_screenshot(page, server):
    """The picture of the README: the head where "it" looks most at "animal", its layer's
    heads as lines with "it" isolated, and its heatmap."""
    text = "The animal didn't cross the street because it was too tired."
    show(page, text)
    [(item, att)] = api_attention(server, [text])
    it, animal = item["tokens"].index("it"), item["tokens"].index("animal")
    layer, head = np.unravel_index(np.argmax(att[:, :, it, animal]), att.shape[:2])
    page.select_option("#layer", str(layer))
    page.select_option("#heat-head", str(head))
    hover_cell(page, it, animal)  # the heatmap's cursor stays on the last cell hovered
    assert page.get_attribute("#heatmap-readout", "data-value") == str(float(att[layer, head, it, animal]))
    page.evaluate("window.scrollTo(0, document.querySelector('#views').getBoundingClientRect().top + scrollY - 8)")
    page.hover(f"#head-view .hv-q .hv-tok[data-index='{it}']")
    assert page.get_attribute("#heatmap", "data-head") == str(head)
    path = shot(page, "viewer-readme-1280x800")
    if not DOCS_IMG.exists() or os.environ.get("HEADWISE_UPDATE_DOCS_IMG") == "1":
        DOCS_IMG.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(path, DOCS_IMG)
