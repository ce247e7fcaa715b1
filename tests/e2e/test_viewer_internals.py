"""Browser tests of the viewer's "Inside the model" panel (headwise/service/static/internals.js,
headimportance.js, ablation.js, hiddennorms.js) and of word-level occlusion in the Analytics
panel: real chromium through Playwright (executable_path, tests/e2e/conftest.py) against a real
`headwise serve`; what the page shows equals what the API returns. The package needs the
`analysis` variant (exported since 2026-11-24); the last test serves a copy without it and
checks that every control says so (422) instead of breaking."""

from __future__ import annotations

import base64
import json
import os

import httpx
import numpy as np
import pytest

from tests.fixtures.viewer import ARTIFACTS, show

TEXT = "The cat sat on the mat because it was tired."
WORDS = "Unbelievably, the cat sat on the mat."
ATTENTION = {"layers": None, "heads": None, "format": "dense", "dtype": "float16", "encoding": "base64"}

pytestmark = [pytest.mark.slow, pytest.mark.timeout(300)]


@pytest.fixture
def page(open_viewer, server):
    return open_viewer(server.url)


def post(server, path: str, body: dict) -> dict:
    r = httpx.post(server.url + path, json=body, timeout=120)
    assert r.status_code == 200, r.text
    return r.json()


def panel_run(pg, button: str, section: str = "#in-section") -> None:
    """Click a panel's button and wait until its request has come back."""
    n = int(pg.get_attribute(section, "data-run"))
    pg.click(button)
    pg.wait_for_function("([s, n]) => Number(document.querySelector(s).dataset.run) > n", arg=[section, n],
                         timeout=120_000)


def click_head(pg, layer: int, head: int) -> None:
    """Click a head of the importance grid and wait for the run it starts (remove mode)."""
    pg.click(f"#hi-grid .hi-cell[data-layer='{layer}'][data-head='{head}']")
    pg.wait_for_function("() => document.querySelector('#in-section').dataset.ablating === 'false'", timeout=120_000)


def embed(server, ablate=None) -> tuple[np.ndarray, np.ndarray]:
    """The viewer's request for TEXT (every head's attention, float16): (embedding, attention)."""
    body = {"inputs": [TEXT], "attention": ATTENTION}
    if ablate:
        body["ablate"] = ablate
    d = post(server, "/v1/embed", body)["data"][0]
    a = d["attention"]
    att = np.frombuffer(base64.b64decode(a["data"]), "<f2").reshape(a["shape"]).astype(np.float64)
    return np.array(d["embedding"], dtype=np.float64), att


def cos(a: np.ndarray, b: np.ndarray) -> float:
    return float(a @ b / np.sqrt((a @ a) * (b @ b)))


def page_attention(pg) -> np.ndarray:
    r = pg.evaluate("() => { const r = window.headwise.state.results[0]; return [r.L, r.H, r.T, Array.from(r.att)]; }")
    return np.array(r[3], dtype=np.float64).reshape([*r[:3], r[2]])


def test_head_importance_grid_equals_the_api(page, server):
    show(page, TEXT)
    assert page.locator("#hi-grid .hi-cell").count() == 6 * 12  # drawn blank after the run
    panel_run(page, "#hi-run")
    assert page.locator("#in-error").is_hidden(), page.text_content("#in-error")
    api = post(server, "/v1/head_importance", {"input": TEXT, "top_k": 10})
    assert api["shape"] == [6, 12]
    cells = page.eval_on_selector_all("#hi-grid .hi-cell", """els => els.map(e =>
        [+e.dataset.layer, +e.dataset.head, Number(e.dataset.value), e.title])""")
    assert len(cells) == 6 * 12
    grid = np.full((6, 12), np.nan)
    for layer, head, value, title in cells:
        grid[layer, head] = value
        assert title.startswith(f"Layer {layer} · head {head}: effect ")
        assert float(title.rsplit(" ", 1)[1]) == pytest.approx(value, rel=1e-3)  # 4 significant digits
    np.testing.assert_allclose(grid, np.array(api["importance"]), rtol=1e-6, atol=1e-9)
    top = page.eval_on_selector_all("#hi-top .hi-pick", "els => els.map(e => [+e.dataset.layer, +e.dataset.head])")
    assert top == [[t["layer"], t["head"]] for t in api["top"]]
    # the most important head is the darkest cell
    best = api["top"][0]
    colours = page.eval_on_selector_all("#hi-grid .hi-cell", "els => els.map(e => getComputedStyle(e).backgroundColor)")
    darkness = [sum(int(c) for c in s[s.index("(") + 1:-1].split(",")[:3]) for s in colours]
    assert int(np.argmin(darkness)) == best["layer"] * 12 + best["head"]
    # a click (in "open" mode) opens that head in the head view
    page.click(f"#hi-grid .hi-cell[data-layer='{best['layer']}'][data-head='{best['head']}']")
    assert page.get_attribute("#head-view", "data-layer") == str(best["layer"])
    assert page.get_attribute("#head-view", "data-heads") == str(best["head"])
    assert page.get_attribute("#heatmap", "data-head") == str(best["head"])
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    page.locator("#in-section").screenshot(path=str(ARTIFACTS / "internals-importance.png"))


def test_removing_heads_reruns_and_the_answer_moves_as_the_api_says(page, server):
    show(page, TEXT)
    before, att0 = embed(server)
    np.testing.assert_allclose(page_attention(page), att0, atol=0)
    page.check("#in-click input[value='ablate']")

    click_head(page, 2, 3)
    assert page.locator("#error").is_hidden(), page.text_content("#error")
    after, att1 = embed(server, {"2": [3]})
    shown = float(page.get_attribute("#ablate-cos-0", "data-value"))
    assert shown == pytest.approx(cos(before, after), abs=1e-6)
    assert shown < 1 - 1e-4  # the answer moved
    assert page.get_attribute("#ablate-out", "data-removed") == "layer 2: head 3"
    assert page.get_attribute("#hi-grid .hi-cell[data-layer='2'][data-head='3']", "data-removed") == "true"
    assert "heads removed: layer 2: head 3" in page.text_content("#status")
    # the views show the ablated model: layers up to 2 unchanged, later ones moved, as the API's
    shown_att = page_attention(page)
    np.testing.assert_allclose(shown_att, att1, atol=0)
    assert np.abs(shown_att[:3] - att0[:3]).max() == 0 and np.abs(shown_att[3:] - att0[3:]).max() > 1e-3
    page.click("#tab-model")
    assert page.eval_on_selector_all("#model-view .mv-cell.removed", "els => els.map(e => [+e.dataset.layer, +e.dataset.head])") == [[2, 3]]
    page.click("#tab-head")

    click_head(page, 0, 7)  # a second head, in another layer
    after2, _ = embed(server, {"0": [7], "2": [3]})
    shown2 = float(page.get_attribute("#ablate-cos-0", "data-value"))
    assert shown2 == pytest.approx(cos(before, after2), abs=1e-6)
    assert shown2 != pytest.approx(shown, abs=1e-9)
    assert page.get_attribute("#ablate-out", "data-removed") == "layer 0: head 7 · layer 2: head 3"

    click_head(page, 2, 3)  # clicking a removed head puts it back
    after3, _ = embed(server, {"0": [7]})
    assert float(page.get_attribute("#ablate-cos-0", "data-value")) == pytest.approx(cos(before, after3), abs=1e-6)

    page.click("#ablate-clear")
    page.wait_for_function("() => document.querySelector('#in-section').dataset.ablating === 'false'")
    assert page.get_attribute("#ablate-out", "data-removed") == ""
    assert page.locator("#hi-grid .hi-cell.removed").count() == 0
    np.testing.assert_allclose(page_attention(page), att0, atol=0)
    assert "heads removed" not in page.text_content("#status")


def test_hidden_state_norm_chart_equals_numpy(page, server):
    show(page, TEXT)
    panel_run(page, "#hs-run")
    assert page.locator("#in-error").is_hidden(), page.text_content("#in-error")
    d = post(server, "/v1/embed", {"inputs": [TEXT], "hidden_states": {
        "pooling": "none", "dtype": "float16", "encoding": "base64"}})["data"][0]
    hs = d["hidden_states"]
    assert hs["shape"][0] == 7
    states = np.frombuffer(base64.b64decode(hs["data"]), "<f2").reshape(hs["shape"]).astype(np.float64)
    norms = np.linalg.norm(states, axis=-1)  # [L + 1, T]
    bars = page.eval_on_selector_all("#hs-chart .hs-bar", "els => els.map(e => [+e.dataset.layer, Number(e.dataset.value)])")
    assert [b[0] for b in bars] == list(range(7))
    np.testing.assert_allclose([b[1] for b in bars], norms.mean(axis=1), rtol=1e-3)
    heat = page.eval_on_selector_all("#hs-heat tbody tr", """rows => rows.map(r =>
        Array.from(r.querySelectorAll('td')).map(td => Number(td.dataset.value)))""")
    np.testing.assert_allclose(np.array(heat), norms, rtol=1e-3)
    # the bars' heights follow the values
    heights = page.eval_on_selector_all("#hs-chart .hs-bar", "els => els.map(e => e.getBoundingClientRect().height)")
    assert int(np.argmax(heights)) == int(np.argmax(norms.mean(axis=1)))


def test_word_occlusion_colours_each_word(page, server):
    page.fill("#an-text-a", WORDS)
    page.select_option("#an-unit", "word")
    panel_run(page, "#an-occlusion", "#analytics-section")
    assert page.locator("#an-error").is_hidden(), page.text_content("#an-error")
    api = post(server, "/v1/occlusion", {"input": WORDS, "unit": "word"})
    words = page.eval_on_selector_all("#an-occlusion-words .an-word", """els => els.map(e =>
        [e.textContent, +e.dataset.start, +e.dataset.end, Number(e.dataset.value), getComputedStyle(e).backgroundColor])""")
    assert len(words) == len(api["units"]) > 0
    assert [w[:3] for w in words] == [[u["text"], u["start"], u["end"]] for u in api["units"]]
    np.testing.assert_allclose([w[3] for w in words], [u["effect"] for u in api["units"]], atol=1e-9)
    assert "unbelievably" in [w[0].lower() for w in words]  # one word of several tokens
    assert all(w[4] not in ("", "rgba(0, 0, 0, 0)") for w in words)
    strongest = int(np.argmax([u["effect"] for u in api["units"]]))
    assert words[strongest][4] == "rgb(8, 48, 107)"  # the top of the colour scale
    assert page.text_content("#an-occlusion-words") == WORDS  # the whole text, in order
    # by token, as before
    page.select_option("#an-unit", "token")
    panel_run(page, "#an-occlusion", "#analytics-section")
    assert page.locator("#an-occlusion .an-token").count() == len(api["tokens"])


@pytest.fixture(scope="module")
def server_without_analysis(start_server, default_package, tmp_path_factory):
    """The same package as exported before the analysis graph (2026-11-24): an `attention`
    variant and no `analysis` one. Its analysis.onnx stands in for that attention graph (the
    server feeds it a head mask of ones), so attention is served and nothing else inside."""
    pkg = tmp_path_factory.mktemp("no-analysis") / default_package.name
    pkg.mkdir()
    manifest = json.loads((default_package / "manifest.json").read_text())
    manifest["variants"]["attention"] = manifest["variants"].pop("analysis")
    (pkg / "manifest.json").write_text(json.dumps(manifest))
    for f in default_package.iterdir():
        if f.name != "manifest.json":
            os.symlink(f, pkg / f.name)
    return start_server(models=pkg, env={"HEADWISE_PRECISION": "fp32"})


def test_without_the_analysis_variant_each_control_shows_the_422(open_viewer, server_without_analysis):
    pg = open_viewer(server_without_analysis.url)
    for button in ("#hi-run", "#hs-run"):
        panel_run(pg, button)
        assert pg.locator("#in-error").is_visible()
        assert "HTTP 422" in pg.text_content("#in-error") and "analysis variant" in pg.text_content("#in-error")
    # removing a head: the run fails, the error box says why, the head comes back
    pg.check("#in-click input[value='ablate']")
    click_head(pg, 1, 2)
    assert pg.get_attribute("#error", "data-status") == "422"
    assert "analysis variant" in pg.text_content("#error-message")
    assert pg.locator("#hi-grid .hi-cell.removed").count() == 0
    assert pg.evaluate("window.headwise.state.ablate.size") == 0
    assert pg.locator("#views").is_visible()  # the last result stays, dimmed
    # word occlusion
    pg.select_option("#an-unit", "word")
    panel_run(pg, "#an-occlusion", "#analytics-section")
    assert "HTTP 422" in pg.text_content("#an-error")
