"""Hostile displays in a real browser: a card's HTML set as ``innerHTML`` (what
ipywidgets' HTML widget does) in Debian's chromium, driven by Playwright. Nothing of
the program's may run in the page or reach the network; its images still draw.
Run it alone with ``pytest -m browser tests/integration/widgets/test_display_browser.py``."""

from __future__ import annotations

import base64
import http.server
import threading
from collections.abc import Iterator
from typing import Any

import pytest
from lab_harness import CHROMIUM, browser_marks

from dsh_jupyter.widgets import display_block
from dsh_jupyter.widgets.doc import Doc
from dsh_jupyter.widgets.render import to_html

PNG = base64.b64decode("iVBORw0KGgoAAAANSUhEUgAAAAIAAAABCAIAAAB7QOjdAAAADUlEQVR4nGP4z8AARAAI/gH/"
                       "xp559wAAAABJRU5ErkJggg==")  # 2x1 pixels
PAYLOADS = [
    '<img src=x onerror="top.__pwned=1"><script>top.__pwned=2</script>',
    '"><img src=x onerror="top.__pwned=3">',
    '</iframe><img src=x onerror="top.__pwned=4">',
    '<svg onload="top.__pwned=5"></svg><details open ontoggle="top.__pwned=6">x</details>',
    '<meta http-equiv="refresh" content="0;url={server}/refresh">',
    '<img src="{server}/pixel"><link rel=stylesheet href="{server}/css">',
    '<style>body{{background:url({server}/background)}}</style><b>styled</b>',
    '<iframe src="{server}/frame"></iframe><object data="{server}/object"></object>',
    '<base href="{server}/"><img src="relative">',
    '<form action="{server}/form"><input name=q value=leak></form>',
]


pytestmark = browser_marks("playwright", seconds=120, kernel=False)


class _Recorder(http.server.BaseHTTPRequestHandler):
    hits: list[str]

    def do_GET(self) -> None:
        self.hits.append(self.path)
        self.send_response(200)
        self.end_headers()

    do_POST = do_GET

    def log_message(self, *_args: Any) -> None:
        pass


@pytest.fixture
def server() -> Iterator[tuple[str, list[str]]]:
    """A local server every payload tries to reach, and the paths it was asked for."""
    hits: list[str] = []
    handler = type("Recorder", (_Recorder,), {"hits": hits})
    httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{httpd.server_address[1]}", hits
    finally:
        httpd.shutdown()
        httpd.server_close()
        thread.join()


def test_hostile_displays_neither_run_nor_fetch(server: tuple[str, list[str]]) -> None:
    from playwright.sync_api import sync_playwright

    url, hits = server
    displays = [{"data": {"text/html": payload.format(server=url), "text/plain": "p"},
                 "metadata": {}} for payload in PAYLOADS]
    displays.append({"data": {"image/png": base64.b64encode(PNG).decode(), "text/plain": "p"},
                     "metadata": {}})
    displays.append({"data": {"image/svg+xml": '<svg xmlns="http://www.w3.org/2000/svg" '
                              'width="4" height="4" onload="top.__pwned=7"><script>'
                              f'top.__pwned=8</script><image href="{url}/svg"/></svg>',
                              "text/plain": "p"}, "metadata": {}})
    card = to_html(Doc(title="run", kind="run-code",
                       blocks=tuple(display_block(d) for d in displays)))
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=CHROMIUM, headless=True,
                                             args=["--no-sandbox", "--disable-gpu"])
        try:
            page = browser.new_page()
            page.goto(f"{url}/page")  # a page of a real origin, as JupyterLab's is
            page.evaluate("html => { document.body.innerHTML = html; }", card)
            page.wait_for_function(
                "() => [...document.images].every(image => image.complete)", timeout=10_000)
            page.wait_for_timeout(1500)  # meta refresh, lazy loads
            assert page.evaluate("() => window.__pwned") is None
            frames = page.locator("iframe.dsh-html")
            assert frames.count() == len(PAYLOADS)
            assert all(frame.url == "about:srcdoc" for frame in page.frames[1:]
                       if frame.parent_frame == page.main_frame)
            sizes = page.evaluate("() => [...document.images].map(i => [i.naturalWidth,"
                                  " i.naturalHeight])")
            assert sizes == [[2, 1], [4, 4]]
        finally:
            browser.close()
    assert [hit for hit in hits if hit not in ("/page", "/favicon.ico")] == []
