"""Browser tests in headless Chromium (Playwright): JupyterLab opens and runs a notebook, and the
built book reads offline with its math rendered and its images loaded.

`make test` builds the book first and installs Chromium when it is missing; it passes the
browser's path in NMT_CHROMIUM. Screenshots go to build/screenshots/.
"""
import contextlib
import functools
import http.server
import os
import secrets
import shutil
import socket
import subprocess
import sys
import threading
import time
import urllib.request
from pathlib import Path
from urllib.parse import urlparse

import pytest
from playwright.sync_api import expect, sync_playwright

ROOT = Path(__file__).resolve().parent.parent
BOOK = ROOT / "build" / "book"
SHOTS = ROOT / "build" / "screenshots"
CHROMIUM = os.environ.get("NMT_CHROMIUM", "/usr/bin/chromium")
# Chromium's own background traffic (updates, sync, field trials) is switched off: the
# machines that run CI have no internet, and the book must not need any.
CHROMIUM_FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
                  "--disable-component-update", "--disable-sync", "--disable-quic", "--no-first-run"]
LAB_NOTEBOOK = "02_attention_pooling.ipynb"

if not Path(CHROMIUM).is_file():
    if "NMT_CHROMIUM" in os.environ:        # make test promised a browser: its absence is a failure
        pytest.fail(f"Chromium not found at {CHROMIUM}", pytrace=False)
    pytest.skip(f"no Chromium at {CHROMIUM} (make test installs it; or set NMT_CHROMIUM)", allow_module_level=True)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def is_local(url: str) -> bool:
    parsed = urlparse(url)
    return parsed.scheme in ("data", "blob", "about") or parsed.hostname in ("127.0.0.1", "localhost")


@pytest.fixture(scope="module")
def browser():
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_FLAGS)
        try:
            yield browser
        finally:
            browser.close()


@pytest.fixture
def page(browser):
    """A fresh page that records, and blocks, every request leaving 127.0.0.1."""
    context = browser.new_context(viewport={"width": 1280, "height": 900})
    page = context.new_page()
    page.outside = []

    def guard(route):
        if is_local(route.request.url):
            route.continue_()
        else:
            page.outside.append(route.request.url)
            route.abort()

    page.route("**/*", guard)
    try:
        yield page
    finally:
        context.close()


@contextlib.contextmanager
def jupyter_lab(workdir: Path, port: int, token: str):
    """JupyterLab on 127.0.0.1:port serving `workdir`; always stopped on the way out."""
    cmd = [sys.executable, "-m", "jupyterlab", "--no-browser", "--ServerApp.ip=127.0.0.1",
           f"--ServerApp.port={port}", "--ServerApp.port_retries=0", f"--IdentityProvider.token={token}",
           f"--ServerApp.root_dir={workdir}", "--LabApp.news_url=", "--LabApp.check_for_updates_class="
           "jupyterlab.NeverCheckForUpdate"]
    if hasattr(os, "geteuid") and os.geteuid() == 0:
        cmd.append("--allow-root")
    env = dict(os.environ, NMT_QUICK="1", JUPYTER_CONFIG_DIR=str(workdir / ".jupyter"),
               JUPYTER_RUNTIME_DIR=str(workdir / ".runtime"), JUPYTERLAB_WORKSPACES_DIR=str(workdir / ".ws"))
    log = open(workdir / "lab.log", "wb")
    proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, env=env, cwd=workdir, start_new_session=True)
    try:
        url = f"http://127.0.0.1:{port}"
        deadline = time.monotonic() + 90
        while True:
            if proc.poll() is not None:
                raise RuntimeError(f"JupyterLab exited with {proc.returncode}:\n{(workdir / 'lab.log').read_text()[-2000:]}")
            try:
                with urllib.request.urlopen(f"{url}/api/status?token={token}", timeout=2) as r:
                    if r.status == 200:
                        break
            except OSError:
                pass
            if time.monotonic() > deadline:
                raise RuntimeError(f"JupyterLab did not answer on {url} within 90 s")
            time.sleep(0.5)
        yield url
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=15)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        log.close()


def test_jupyterlab_runs_a_notebook_and_shows_its_text_and_figures(page, tmp_path):
    # A copy: Run All marks the notebook dirty and Lab may autosave; the committed file stays as it is.
    shutil.copy(ROOT / "notebooks" / LAB_NOTEBOOK, tmp_path / LAB_NOTEBOOK)
    token = secrets.token_hex(16)
    with jupyter_lab(tmp_path, free_port(), token) as url:
        page.goto(f"{url}/lab/tree/{LAB_NOTEBOOK}?token={token}")
        notebook = page.locator(".jp-NotebookPanel:not(.lm-mod-hidden) .jp-Notebook")
        expect(notebook).to_be_visible(timeout=60_000)
        # Start from a clean page, so that what we find below was produced by this run.
        page.get_by_role("menuitem", name="Edit", exact=True).click()
        page.get_by_role("menuitem", name="Clear Outputs of All Cells").click()
        expect(notebook.locator(".jp-OutputArea-output")).to_have_count(0, timeout=10_000)
        expect(page.locator(".jp-Notebook-ExecutionIndicator[data-status='idle']")).to_have_count(1, timeout=60_000)

        page.get_by_role("menuitem", name="Run", exact=True).click()
        page.get_by_role("menuitem", name="Run All Cells", exact=True).click()

        outputs = notebook.locator(".jp-OutputArea-output")
        expect(outputs.filter(has_text="50 training points, 50 test queries")).to_have_count(1, timeout=120_000)
        expect(outputs.filter(has_text="learned w =")).to_have_count(1, timeout=120_000)
        figures = notebook.locator(".jp-OutputArea-output img")
        expect(figures.first).to_be_visible(timeout=60_000)
        expect(notebook.locator(".jp-OutputArea-output[data-mime-type='application/vnd.jupyter.stderr']")
               .filter(has_text="Error")).to_have_count(0)
        # Lab renders only the cells near the viewport, so count what is drawn, not every figure.
        expect(page.locator(".jp-Notebook-ExecutionIndicator[data-status='idle']")).to_have_count(1, timeout=60_000)
        assert figures.count() >= 1
        assert all(figures.nth(i).evaluate("img => img.complete && img.naturalWidth > 0")
                   for i in range(figures.count()))
        news = page.get_by_role("button", name="No", exact=True)     # Lab's one-time "Jupyter news?" toast
        if news.count():
            news.first.click()
        figures.first.scroll_into_view_if_needed()
        SHOTS.mkdir(parents=True, exist_ok=True)
        page.screenshot(path=str(SHOTS / "jupyterlab.png"))


@contextlib.contextmanager
def serve(folder: Path):
    handler = functools.partial(http.server.SimpleHTTPRequestHandler, directory=str(folder))
    handler.log_message = lambda *args: None
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()


def loaded_images(page) -> tuple[int, int]:
    return page.evaluate("""() => {
        const imgs = [...document.querySelectorAll('article img')];
        return [imgs.length, imgs.filter(i => i.complete && i.naturalWidth > 0).length];
    }""")


@pytest.mark.skipif(not (BOOK / "index.html").is_file(), reason="build the book first: make book")
def test_book_reads_offline_with_math_and_images(page):
    with serve(BOOK) as url:
        page.goto(f"{url}/index.html")
        expect(page.locator("article h1").first).to_contain_text("Attention and the Transformer")
        chapters = page.locator("nav.bd-links a.reference.internal")
        assert chapters.count() >= 11, "the table of contents lists every chapter"
        first_titles = [chapters.nth(i).inner_text() for i in range(3)]
        assert first_titles[0].startswith("0.") and first_titles[1].startswith("1.")
        SHOTS.mkdir(parents=True, exist_ok=True)
        page.screenshot(path=str(SHOTS / "book-index.png"))

        page.goto(f"{url}/03_scoring.html")
        # MathJax (served from _static/mathjax) turns each formula into an mjx-container.
        expect(page.locator("mjx-container").first).to_be_visible(timeout=30_000)
        assert page.locator("mjx-container").count() >= 3
        assert page.locator("article").inner_text().count("$") < 4, "unrendered TeX left on the page"
        page.wait_for_load_state("networkidle")
        total, loaded = loaded_images(page)
        assert total >= 2 and loaded == total, f"{loaded} of {total} figures loaded"
        page.locator("mjx-container").first.scroll_into_view_if_needed()
        page.screenshot(path=str(SHOTS / "book-chapter.png"))
    assert page.outside == [], f"the book asked for outside resources: {page.outside}"
