"""Browser tests of the attention viewer under other screens and settings: a phone-sized
screen, a small attention budget (the 413 message), and an API key the page asks for.
As tests/e2e/test_viewer.py: headless Debian chromium through Playwright, real servers."""

from __future__ import annotations

import pytest

from tests.fixtures.viewer import shot, show, wait_ready

pytestmark = [pytest.mark.slow, pytest.mark.timeout(300)]


def test_narrow_screen(browser, server):
    ctx = browser.new_context(viewport={"width": 390, "height": 844}, device_scale_factor=2)
    pg = ctx.new_page()
    try:
        pg.goto(server.url + "/")
        wait_ready(pg, 0)
        for tab in ("head", "model", "summary"):
            pg.click(f"#tab-{tab}")
            overflow = pg.evaluate("document.documentElement.scrollWidth - document.documentElement.clientWidth")
            assert overflow <= 0, f"{tab}: page wider than the screen by {overflow}px"
            shot(pg, f"viewer-{tab}-390x844", full_page=True)
        pg.click("#tab-model")
        pg.click("#model-view .mv-cell[data-layer='1'][data-head='2']")
        assert pg.get_attribute("#head-view", "data-layer") == "1"
    finally:
        ctx.close()


def test_error_message_when_over_attention_budget(browser, start_server):
    """A small attention budget: a long input gets a clear 413 message, then a short one works."""
    small = start_server(env={"HEADWISE_ATTENTION_BUDGET_BYTES": "200000"})
    url = small.url
    try:
        ctx = browser.new_context(viewport={"width": 1280, "height": 800})
        pg = ctx.new_page()
        try:
            pg.goto(url + "/")
            wait_ready(pg, 0)  # the example sentence fits: 6·12·13²·2 bytes
            long_text = " ".join(["attention"] * 60)
            pg.fill("#text-a", long_text)
            pg.click("#run")
            pg.wait_for_selector("#error:not([hidden])")
            assert pg.get_attribute("#error", "data-status") == "413"
            text = pg.inner_text("#error")
            assert "attention budget" in text.lower()
            assert "Shorten the text" in text
            assert pg.get_attribute("body", "data-state") == "error"
            assert pg.get_attribute("#error", "role") == "alert"
            shot(pg, "viewer-error-413-1280x800")
            show(pg, "Short again.")
            assert pg.is_hidden("#error")
            # an empty box is caught before any request
            pg.fill("#text-a", "  ")
            pg.click("#run")
            assert "empty" in pg.inner_text("#error")
        finally:
            ctx.close()
    finally:
        small.stop()


def test_api_key_is_asked_for_and_sent(browser, start_server):
    """With HEADWISE_API_KEY set the page still loads, says a key is needed, and works with it."""
    locked = start_server(env={"HEADWISE_API_KEY": "s3cret-key"})
    try:
        ctx = browser.new_context(viewport={"width": 1280, "height": 800})
        pg = ctx.new_page()
        try:
            pg.goto(locked.url + "/")
            pg.wait_for_selector("#error:not([hidden])")
            assert pg.get_attribute("#error", "data-status") == "401"
            assert "API key" in pg.inner_text("#error")
            assert pg.is_visible("#api-key")
            pg.fill("#api-key", "s3cret-key")
            pg.click("#run")
            wait_ready(pg, 0)
            assert pg.is_hidden("#error")
            assert pg.eval_on_selector_all("#tokens-0 li", "e => e.length") > 2
        finally:
            ctx.close()
    finally:
        locked.stop()
