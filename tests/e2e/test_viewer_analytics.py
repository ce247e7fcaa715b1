"""Browser tests of the viewer's Analytics panel (headwise/service/static/analytics.js,
analyticsviews.js): real chromium through Playwright (executable_path, tests/e2e/conftest.py)
against a real `headwise serve`; what the page shows equals what the API returns."""

from __future__ import annotations

from pathlib import Path

import httpx
import numpy as np
import pytest

ARTIFACTS = Path(__file__).resolve().parents[2] / "tests" / "e2e" / "artifacts"
A = "A man is playing a guitar on stage."
B = "Someone performs music for a crowd."

pytestmark = [pytest.mark.slow, pytest.mark.timeout(300)]


@pytest.fixture
def page(open_viewer, server):
    return open_viewer(server.url)


def run(pg, button: str) -> None:
    n = int(pg.evaluate("document.querySelector('#analytics-section').dataset.run"))
    pg.fill("#an-text-a", A)
    pg.fill("#an-text-b", B)
    pg.click(button)
    pg.wait_for_function("n => Number(document.querySelector('#analytics-section').dataset.run) > n", arg=n,
                         timeout=60_000)
    assert pg.locator("#an-error").is_hidden(), pg.locator("#an-error").text_content()


def cells(pg, selector: str) -> np.ndarray:
    rows = pg.eval_on_selector_all(f"{selector} tbody tr", """rows => rows.map(r =>
        Array.from(r.querySelectorAll('td')).map(td => Number(td.dataset.value)))""")
    return np.array(rows)


def values(pg, selector: str) -> list[float]:
    return pg.eval_on_selector_all(selector, "els => els.map(e => Number(e.dataset.value))")


def test_rollout_view_shows_the_api_rollout_and_mean_row_importance(page, server):
    run(page, "#an-rollout")
    api = httpx.post(f"{server.url}/v1/embed", json={"inputs": [A], "attention": {"aggregate": "rollout"}},
                     timeout=60).json()["data"][0]
    r = np.array(api["attention"]["data"])
    np.testing.assert_allclose(cells(page, "#an-rollout"), r, atol=1e-7)
    # mean pooling: a token's importance is the mean of R's column (over the rows)
    np.testing.assert_allclose(values(page, "#an-importance .an-token"), r.mean(axis=0), atol=1e-6)
    assert page.eval_on_selector_all("#an-importance .an-token", "els => els.map(e => e.textContent)") == api["tokens"]
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    page.locator("#analytics-section").screenshot(path=str(ARTIFACTS / "analytics-rollout.png"))


def test_similarity_view_shows_score_contributions_and_top_pairs(page, server):
    run(page, "#an-similarity")
    api = httpx.post(f"{server.url}/v1/similarity", json={"source": A, "targets": [B], "explain": True},
                     timeout=60).json()
    d = api["data"][0]
    assert float(page.get_attribute("#an-score", "data-value")) == pytest.approx(d["score"], abs=1e-9)
    np.testing.assert_allclose(cells(page, "#an-contrib"), np.array(d["contributions"]), atol=1e-7)
    pairs = page.eval_on_selector_all("#an-pairs li", "els => els.map(e => [+e.dataset.source, +e.dataset.target])")
    assert pairs == [[p["source"], p["target"]] for p in d["top_pairs"]]


def test_occlusion_view_shades_each_token_by_its_effect(page, server):
    run(page, "#an-occlusion")
    api = httpx.post(f"{server.url}/v1/occlusion", json={"input": A}, timeout=60).json()
    np.testing.assert_allclose(values(page, "#an-occlusion .an-token"), api["effects"], atol=1e-9)
    assert page.eval_on_selector_all("#an-occlusion .an-token", "els => els.map(e => e.textContent)") == api["tokens"]
