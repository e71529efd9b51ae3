"""Browser tests in headless Chromium (Playwright): JupyterLab runs chapter 8 and its
translator app, and the built book reads offline with its math rendered and its images
loaded.

`make test` builds the book first and installs Chromium when it is missing; it passes
the browser's path in NMT_CHROMIUM. Screenshots go to build/screenshots/.
"""

import contextlib
import functools
import http.server
import json
import os
import re
import secrets
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
CHROMIUM_FLAGS = (
    "--headless --no-sandbox --disable-gpu --disable-background-networking"
    " --disable-component-update --disable-sync --disable-quic --no-first-run"
).split()
WIDGET_NOTEBOOK = (  # ends with the translator app (nmt_lib.run.app)
    "08_evaluation.ipynb"
)
FREE_INPUT = "My sister forgot her umbrella at the station yesterday."

if not Path(CHROMIUM).is_file():
    # make test promised a browser: its absence is a failure
    if "NMT_CHROMIUM" in os.environ:
        pytest.fail(f"Chromium not found at {CHROMIUM}", pytrace=False)
    pytest.skip(
        f"no Chromium at {CHROMIUM} (make test installs it; or set NMT_CHROMIUM)",
        allow_module_level=True,
    )


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def is_local(url: str) -> bool:
    parsed = urlparse(url)
    local = parsed.hostname in ("127.0.0.1", "localhost")
    return parsed.scheme in ("data", "blob", "about") or local


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
    page.console = []  # what the page logged, printed when a test fails
    page.on("console", lambda m: page.console.append(f"{m.type}: {m.text[:300]}"))
    try:
        yield page
    finally:
        context.close()


@contextlib.contextmanager
def jupyter_lab(workdir: Path, port: int, token: str):
    """JupyterLab on 127.0.0.1:port serving `workdir`; always stopped on the way out."""
    cmd = [sys.executable, "-m", "jupyterlab", "--no-browser", "--LabApp.news_url="]
    cmd += ["--ServerApp.ip=127.0.0.1", f"--ServerApp.port={port}"]
    cmd += ["--ServerApp.port_retries=0", f"--IdentityProvider.token={token}"]
    cmd += [f"--ServerApp.root_dir={workdir}"]
    cmd += ["--LabApp.check_for_updates_class=jupyterlab.NeverCheckForUpdate"]
    if hasattr(os, "geteuid") and os.geteuid() == 0:
        cmd.append("--allow-root")
    env = dict(
        os.environ,
        NMT_QUICK="1",
        JUPYTER_CONFIG_DIR=str(workdir / ".jupyter"),
        JUPYTER_RUNTIME_DIR=str(workdir / ".runtime"),
        JUPYTERLAB_WORKSPACES_DIR=str(workdir / ".ws"),
    )
    log = open(workdir / "lab.log", "wb")
    output = dict(stdout=log, stderr=subprocess.STDOUT)
    proc = subprocess.Popen(cmd, **output, env=env, cwd=workdir, start_new_session=True)
    try:
        url = f"http://127.0.0.1:{port}"
        deadline = time.monotonic() + 90
        while True:
            if proc.poll() is not None:
                raise RuntimeError(
                    "JupyterLab exited with"
                    f" {proc.returncode}:\n{(workdir / 'lab.log').read_text()[-2000:]}"
                )
            try:
                with urllib.request.urlopen(
                    f"{url}/api/status?token={token}", timeout=2
                ) as r:
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


def copy_without_outputs(src: Path, dst: Path) -> int:
    """Copy a notebook with its outputs and execution counts removed; return its number
    of code cells."""
    nb = json.loads(src.read_text(encoding="utf-8"))
    code = [c for c in nb["cells"] if c["cell_type"] == "code"]
    for cell in code:
        cell["outputs"], cell["execution_count"] = [], None
    dst.write_text(json.dumps(nb, indent=1), encoding="utf-8")
    return len(code)


def wait_for_idle_kernel(
    page, url: str, token: str, path: str, timeout: float = 120
) -> str:
    """Wait until the server reports a kernel for `path` that has started and is idle.

    Lab's execution indicator says "idle" before any kernel exists, so it cannot tell on
    its own that a Run All would reach a kernel; the server's session list can. The
    waits go through `page.wait_for_timeout`, not `time.sleep`: the request guard runs
    in this thread, and a blocked thread would hold up every request the page makes.
    """
    deadline = time.monotonic() + timeout
    state = "no session"
    while time.monotonic() < deadline:
        with urllib.request.urlopen(
            f"{url}/api/sessions?token={token}", timeout=5
        ) as r:
            sessions = [
                s for s in json.load(r) if s.get("path") == path and s.get("kernel")
            ]
        if sessions:
            state = sessions[0]["kernel"]["execution_state"]
            if state == "idle":
                return sessions[0]["kernel"]["id"]
        page.wait_for_timeout(500)
    raise AssertionError(
        f"the kernel for {path} was not idle within {timeout:.0f} s (last state:"
        f" {state})"
    )


@contextlib.contextmanager
def lab_notebook(page, tmp_path: Path, name: str, shot: str):
    """JupyterLab showing a copy of notebooks/NAME without its outputs (whatever appears
    was produced by this run, and the committed file stays as it is: Run All marks the
    notebook dirty and Lab may autosave), its kernel started and idle. Yields (url,
    token, notebook, indicator, number of code cells); on failure, saves
    SHOT-failure.png and prints the console and Lab's log."""
    n_code = copy_without_outputs(ROOT / "notebooks" / name, tmp_path / name)
    token = secrets.token_hex(16)
    SHOTS.mkdir(parents=True, exist_ok=True)
    with jupyter_lab(tmp_path, free_port(), token) as url:
        try:
            page.goto(f"{url}/lab/tree/{name}?token={token}")
            notebook = page.locator(
                ".jp-NotebookPanel:not(.lm-mod-hidden) .jp-Notebook"
            )
            expect(notebook).to_be_visible(timeout=60_000)
            indicator = page.locator(
                ".jp-NotebookPanel:not(.lm-mod-hidden) .jp-Notebook-ExecutionIndicator"
            )
            # Lab starts the kernel after showing the notebook; wait until the server
            # has it idle and the page has connected to it (the indicator goes
            # "connecting" -> "idle").
            wait_for_idle_kernel(page, url, token, name)
            expect(indicator).to_have_attribute("data-status", "idle", timeout=60_000)
            yield url, token, notebook, indicator, n_code
        except Exception:
            page.screenshot(path=str(SHOTS / f"{shot}-failure.png"))
            print("browser console:", *page.console[-40:], sep="\n  ")
            print(
                "lab.log:",
                (tmp_path / "lab.log").read_text(errors="replace")[-3000:],
                sep="\n",
            )
            raise


def run_all(page):
    page.get_by_role("menuitem", name="Run", exact=True).click()
    page.get_by_role("menuitem", name="Run All Cells", exact=True).click()


def dismiss_news(page):
    # Lab's one-time "Jupyter news?" toast
    news = page.get_by_role("button", name="No", exact=True)
    if news.count():
        news.first.click()
        expect(news).to_have_count(0)


def no_errors(notebook):
    expect(
        notebook.locator(
            ".jp-OutputArea-output[data-mime-type='application/vnd.jupyter.stderr']"
        ).filter(has_text="Error")
    ).to_have_count(0)


def test_jupyterlab_translator_app_translates_a_typed_sentence_and_redraws(
    page, tmp_path
):
    lab = lab_notebook(page, tmp_path, WIDGET_NOTEBOOK, "translator")
    with lab as (url, token, notebook, indicator, _):
        run_all(page)
        app = notebook.locator(".nmt-translator")
        # quick mode trains chapter 8's models first
        expect(app).to_have_count(1, timeout=300_000)
        # The app's later cells set its controls; wait for the last one (the static
        # views) and an idle kernel, so that what the test types is not interleaved with
        # Run All.
        expect(notebook.locator(".nmt-view").first).to_be_attached(timeout=300_000)
        wait_for_idle_kernel(page, url, token, WIDGET_NOTEBOOK)
        expect(indicator).to_have_attribute("data-status", "idle", timeout=120_000)
        dismiss_news(page)
        app.scroll_into_view_if_needed()
        heatmap = app.locator("img.widget-image")
        expect(heatmap).to_have_attribute(
            "src", re.compile("^blob:|^data:"), timeout=60_000
        )
        before = heatmap.get_attribute("src")
        box = app.locator(".widget-text input")
        box.fill("I am cold.")
        box.press("Enter")
        # a new sentence, a new map
        expect(heatmap).not_to_have_attribute("src", before, timeout=60_000)
        tokens = app.locator(".nmt-token")
        expect(tokens.first).to_be_visible()
        assert tokens.count() >= 1 and "looking most at" in tokens.first.get_attribute(
            "title"
        )
        selects = app.locator(".widget-dropdown select")  # attention kind, layer, head
        for which, label in [(1, "1"), (2, "1")]:  # layer 1, then head 1
            before = heatmap.get_attribute("src")
            selects.nth(which).select_option(label=label)
            expect(heatmap).not_to_have_attribute("src", before, timeout=30_000)
        box.fill("?!")
        box.press("Enter")
        expect(app).to_contain_text("only punctuation", timeout=30_000)
        before = heatmap.get_attribute("src")
        box.fill(FREE_INPUT)  # the screenshot: a sentence of one's own, not a test line
        box.press("Enter")
        expect(heatmap).not_to_have_attribute("src", before, timeout=60_000)
        expect(tokens.first).to_be_visible(timeout=30_000)
        # The app runs the published model, which keeps case (chapter 7's model writes
        # lowercase words).
        assert tokens.first.inner_text().strip()[:1].isupper(), (
            tokens.first.inner_text()
        )
        expect(indicator).to_have_attribute("data-status", "idle", timeout=120_000)
        no_errors(notebook)
        app.screenshot(path=str(SHOTS / "translator.png"))


@contextlib.contextmanager
def serve(folder: Path):
    handler = functools.partial(
        http.server.SimpleHTTPRequestHandler, directory=str(folder)
    )
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


OVERFLOWING = """() => {
    document.querySelectorAll('article details').forEach(d => d.open = true);
    const longest = text => text.split('\\n')
        .reduce((a, b) => b.length > a.length ? b : a, '');
    return [...document.querySelectorAll('article pre')]
    .filter(pre => !pre.closest('.cell_output')
        && pre.scrollWidth > pre.clientWidth + 1)
    .map(pre => longest(pre.innerText).slice(0, 70)); }"""


@pytest.mark.skipif(
    not (BOOK / "index.html").is_file(), reason="build the book first: make book"
)
def test_book_reads_offline_with_math_images_and_code_that_fits(page):
    with serve(BOOK) as url:
        page.goto(f"{url}/index.html")
        expect(page.locator("article h1").first).to_contain_text(
            "Attention and the Transformer"
        )
        chapters = page.locator("nav.bd-links a.reference.internal")
        titles = [chapters.nth(i).inner_text() for i in range(chapters.count())]
        assert len(titles) >= 12, f"the table of contents lists every chapter: {titles}"
        assert (
            titles[0].startswith("0.")
            and titles[1].startswith("1.")
            and "10. Making it fast" in titles
        )
        chapters_end = titles.index("10. Making it fast") + 1
        assert titles[chapters_end].startswith("11. The decoder alone"), titles
        # then the solutions follow
        assert titles[chapters_end + 1].startswith("12. From 2017 to today"), titles
        # Sphinx curls the apostrophe
        assert titles[-1].replace("\u2019", "'") == "Teacher's guide"
        records = ["Results", "Benchmarks", "The speedrun", "The command-line tools"]
        records.append("How the repository works")
        assert titles[-6:-1] == records, titles  # the record pages, before the guide
        assert titles[-7].startswith("Solutions to chapter 12"), titles
        # after 8, before 9
        subwords = next(i for i, t in enumerate(titles) if t.startswith("8b."))
        assert titles[subwords - 1].startswith("8.") and titles[
            subwords + 1
        ].startswith("9."), titles
        SHOTS.mkdir(parents=True, exist_ok=True)
        page.screenshot(path=str(SHOTS / "book-index.png"))
        pages = [chapters.nth(i).get_attribute("href") for i in range(chapters.count())]
        for href in pages:  # the hidden setup cell: every page opens with its title
            page.goto(f"{url}/{href}")
            first = page.evaluate(
                "() => document.querySelector('article').querySelector('h1,"
                " div.cell').tagName"
            )
            assert first == "H1", f"{href} shows a code cell above its title"
            # a token written as <eos> outside backticks becomes an unknown element: the
            # reader sees nothing
            hidden = page.evaluate(
                "() => document.querySelectorAll('article :is(eos, bos, pad,"
                " unk)').length"
            )
            assert hidden == 0, (
                f"{href}: {hidden} special tokens swallowed as HTML tags (write them in"
                " backticks)"
            )
            # code (cells' inputs, commands in the text) fits the column at 1280 pixels;
            # outputs may scroll
            assert not (lines := page.evaluate(OVERFLOWING)), (
                f"{href}: code wider than the page: {lines}"
            )

        for name in (
            "results",
            "benchmarks",
        ):  # their tables, rendered from the records
            page.goto(f"{url}/{name}.html")
            assert page.locator("article table").count() >= 1, (
                f"{name}.html shows no table"
            )
        page.goto(f"{url}/command-line.html")
        # the soak record, rendered
        assert "SIGKILLs" in page.locator("article").inner_text()

        page.goto(f"{url}/03_scoring.html")
        # MathJax (served from _static/mathjax) turns each formula into an
        # mjx-container.
        expect(page.locator("mjx-container").first).to_be_visible(timeout=30_000)
        assert page.locator("mjx-container").count() >= 3
        assert page.locator("article").inner_text().count("$") < 4, (
            "unrendered TeX left on the page"
        )
        page.wait_for_load_state("networkidle")
        total, loaded = loaded_images(page)
        assert total >= 2 and loaded == total, f"{loaded} of {total} figures loaded"
        page.locator("mjx-container").first.scroll_into_view_if_needed()
        page.screenshot(path=str(SHOTS / "book-chapter.png"))
    assert page.outside == [], f"the book asked for outside resources: {page.outside}"


SLIDES = ROOT / "build" / "slides"
TOO_TALL = """() => { const height = Reveal.getConfig().height;
    return Reveal.getSlides().map((s, i) => {
        Reveal.slide(i);
        return [i + 1, s.scrollHeight, (s.querySelector('h1, h2') || {}).innerText];
    }).filter(([i, h]) => h > height); }"""


@pytest.mark.skipif(
    not (SLIDES / "index.html").is_file(), reason="build the slides first: make slides"
)
def test_every_deck_opens_offline_with_its_figures_and_math_and_every_slide_fits(
    page,
):
    plan = json.loads((ROOT / "book" / "module_plan.json").read_text())["ten_weeks"]
    with serve(SLIDES) as url:
        page.goto(f"{url}/index.html")
        decks = [a.get_attribute("href") for a in page.locator("li a").all()]
        assert len(decks) == len(plan["sessions"]), decks
        too_tall, formulas = {}, 0
        for href in decks:
            page.goto(f"{url}/{href}")
            page.wait_for_function(
                "() => window.Reveal && Reveal.isReady()", timeout=30_000
            )
            page.evaluate(
                "async () => { if (window.MathJax && MathJax.startup) await"
                " MathJax.startup.promise; }"
            )
            assert page.evaluate("() => Reveal.getTotalSlides()") >= 6, href
            lecture = [page.locator(s).count() for s in ("pre code", "aside.notes")]
            assert all(lecture) and page.evaluate("Reveal.hasPlugin('notes')"), href
            images = page.evaluate(
                "() => [...document.images].map(i => i.complete && i.naturalWidth > 0)"
            )
            assert all(images), (
                f"{href}: {images.count(False)} of {len(images)} figures did not load"
            )
            formulas += page.locator("mjx-container").count()
            if tall := page.evaluate(TOO_TALL):
                too_tall[href] = tall
        page.goto(f"{url}/{decks[1]}#/1")
        page.wait_for_function("() => window.Reveal && Reveal.isReady()")
        SHOTS.mkdir(parents=True, exist_ok=True)
        page.screenshot(path=str(SHOTS / "slides.png"))
    assert formulas > 0, "no formula was typeset"
    assert too_tall == {}, (
        f"slides taller than the deck's height (slide, height, title): {too_tall}"
    )
    assert page.outside == [], f"the slides asked for outside resources: {page.outside}"
