# make course: set up .venv, run every chapter in build/, save figures, print a summary table, build the book.
# make solutions: run the exercises' solutions notebooks the same way.
# make test:   set up .venv, check nmt_lib/ against the notebooks, ruff, unit tests, nbval (quick mode),
#              browser tests of JupyterLab and of the book (headless Chromium, installed if missing).
# make book:   the static HTML book from the committed notebooks, in build/book (no re-execution).
# make slides: a reveal.js lecture per session of the ten-week plan (book/lectures/, with figures, code and
#              run times from the committed notebooks), in build/slides.
# make grade:  grade a class with nbgrader and the grading sandbox (ASSIGNMENT=A1|A2|A3 SUBMISSIONS=class/), or one
#              notebook (SUBMISSION=notebook.ipynb), for teachers.
# make release: the assignments' student edition, assignments/, from their nbgrader sources in solutions/assignments/.
# make student: the student edition in build/student (no solutions, hidden tests or teacher's guide).
SHELL := /bin/bash
PYTHON ?= $(shell command -v python3.11 || command -v python3)
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
NBVAL := --nbval-lax --nbval-current-env --nbval-sanitize-with tools/nbval_sanitize.cfg \
         --nbval-kernel-startup-timeout 300
# The notebooks nbval runs: the chapters, the solutions (absent from the student edition) and the assignments.
NOTEBOOK_DIRS := notebooks $(wildcard solutions) assignments
# The tests and the notebooks under nbval run in two workers of one thread each, one per
# core (pytest-xdist; a notebook's cells stay in one worker). No verdict depends on the
# machine's speed: fixtures train by update count, and waits leave room for slow imports.
TWO_WORKERS := -n 2 --dist loadscope
ONE_THREAD := NMT_THREADS=1 OMP_NUM_THREADS=1
# The hand-written Python (the lessons' modules are generated from the notebooks).
HANDWRITTEN := nmt_lib/base nmt_lib/run nmt_lib/checks nmt_lib/__init__.py nmt_lib/__main__.py \
               grading tests tools bench experiments speedrun book/conf.py

.PHONY: setup course solutions test test-latest unit quick nbval lab export notebooks clean book chromium bubblewrap bench soak \
        grade release student slides
MATHJAX := build/mathjax-3.2.2
CHROMIUM ?= /usr/bin/chromium
SUDO := $(shell [ "$$(id -u)" = 0 ] || echo sudo)

# requirements.txt pins pyproject.toml's dependencies (what a learner's `pip install -e .` takes) and
# the maintainers' tools; pip check fails when it leaves one of those dependencies out.
$(STAMP): requirements.txt pyproject.toml
	@test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	@$(BIN)/python -c 'import sys; v = sys.version_info[:2]; v == (3, 11) or print(f"warning: the course is pinned for Python 3.11, .venv has {v[0]}.{v[1]}")'
	$(BIN)/python -m pip install -r requirements.txt
	$(BIN)/python -m pip install --no-deps -e .
	$(BIN)/python -m pip check
	@touch $@

setup: $(STAMP)

course: $(STAMP)
	$(BIN)/python tools/run_course.py
	$(MAKE) book

# The exercises' solutions, executed like the chapters (copies in build/course/solutions/).
solutions: $(STAMP)
	$(BIN)/python tools/run_course.py --solutions

test: $(STAMP) book slides chromium bubblewrap
	$(BIN)/python tools/export_lib.py --check
	$(BIN)/python tools/release.py --check
	$(BIN)/ruff check .
	$(BIN)/ruff format --check --quiet $(HANDWRITTEN)
	NMT_QUICK=1 NMT_CHROMIUM=$(CHROMIUM) $(ONE_THREAD) $(BIN)/python -m pytest $(TWO_WORKERS) \
	  tests $(NOTEBOOK_DIRS) $(NBVAL)

# make test-latest: a second environment with the newest releases (no d2l, which pins old numpy),
# built once; the quick unit tests and the chapters under nbval run there, so every chapter also runs
# without d2l; so does the hosted path (the test marked `hosted`: the course's wheel, which setuptools
# builds, installed not editable, and chapters 1 and 8 run outside the checkout; 35 to 63 s on one
# core). The solutions and assignments (which use the chapters' code and not d2l), the other slow tests
# (browser, subprocesses, faults), grading (nbgrader and its sandbox, which a teacher runs on the
# pinned stack) and the benchmark run on the pinned stack only.
# PIP_CONSTRAINT=/dev/null: a pip configuration that caps torch at the pinned release (as these
# machines have) must not hold the newest environment back.
LATEST := .venv-latest
LATEST_PKGS := torch numpy pandas matplotlib jupyterlab ipykernel nbclient nbval sacrebleu \
               sentencepiece safetensors pytest pytest-xdist tqdm ipywidgets scipy pooch setuptools
# The packages apart from the course's own install, which writes nmt_lib.egg-info into the
# checkout: .ci/run builds them while .venv is set up.
$(LATEST)/.packages: pyproject.toml Makefile
	@test -x $(LATEST)/bin/python || $(PYTHON) -m venv $(LATEST)
	PIP_CONSTRAINT=/dev/null $(LATEST)/bin/python -m pip install -q --upgrade $(LATEST_PKGS)
	@touch $@
$(LATEST)/.installed: $(LATEST)/.packages
	$(LATEST)/bin/python -m pip install -q --no-deps -e .
	@touch $@

test-latest: $(LATEST)/.installed
	@$(LATEST)/bin/python -m pip list --format=freeze 2>/dev/null | grep -iE "^(torch|numpy|pandas|matplotlib|nbval|sacrebleu|sentencepiece)=="
	NMT_QUICK=1 $(ONE_THREAD) $(LATEST)/bin/python -m pytest $(TWO_WORKERS) -m "not slow or hosted" \
	  tests notebooks $(NBVAL) --ignore=tests/test_browser.py \
	  --ignore=tests/test_grade.py --ignore=tests/test_a3.py --ignore=tests/test_sandbox.py

# The course's downloader (pooch, in .venv) fetches them; order-only: a newer .venv
# does not fetch them again.
$(MATHJAX)/tex-chtml.js: | $(STAMP)
	$(BIN)/python tools/fetch_static.py mathjax $(MATHJAX)

REVEAL := build/reveal.js-5.1.0
$(REVEAL)/dist/reveal.js: | $(STAMP)
	$(BIN)/python tools/fetch_static.py reveal.js $(REVEAL)

# Offline decks (reveal.js, its speaker notes and MathJax copied beside them); open build/slides/index.html,
# and press S in a deck for the speaker view.
slides: $(STAMP) $(MATHJAX)/tex-chtml.js $(REVEAL)/dist/reveal.js
	$(BIN)/python tools/slides.py build/slides --reveal $(REVEAL) --mathjax $(MATHJAX)

book: $(STAMP) $(MATHJAX)/tex-chtml.js
	rm -rf build/book-src && mkdir -p build/book-src/_static
	cp book/conf.py book/*.md notebooks/*.ipynb build/book-src/
	cp book/course.css build/book-src/_static/
	if [ -d solutions ]; then mkdir -p build/book-src/solutions && cp solutions/*.ipynb build/book-src/solutions/; fi
	cp -r $(MATHJAX) build/book-src/_static/mathjax
	$(BIN)/sphinx-build -b html -q build/book-src build/book
	@echo "book: build/book/index.html (works offline; open it in a browser)"

# Grading runs each submission's kernel in bubblewrap's namespaces (grading/jail.py).
bubblewrap:
	@command -v bwrap >/dev/null || { command -v apt-get >/dev/null && \
	  $(SUDO) apt-get update -q && $(SUDO) env DEBIAN_FRONTEND=noninteractive apt-get install -y -q bubblewrap; } || \
	  { echo "bubblewrap (bwrap) not found: install it to grade (apt or dnf install bubblewrap)"; exit 1; }

# The browser tests drive Debian's Chromium; elsewhere set CHROMIUM=/path/to/chrome.
chromium:
	@test -x "$(CHROMIUM)" || { command -v apt-get >/dev/null && \
	  $(SUDO) apt-get update -q && $(SUDO) env DEBIAN_FRONTEND=noninteractive apt-get install -y -q chromium; } || \
	  { echo "Chromium not found at $(CHROMIUM): install it, or run make with CHROMIUM=/path/to/chrome"; exit 1; }

bench: $(STAMP)
	$(BIN)/python bench/bench.py

# The fault-injection tests of `make test` (20 SIGKILLs, SIGINTs), with many more faults: about 3 minutes.
# Its figures go to records/soak.json, which the book's command-line page renders.
soak: $(STAMP)
	rm -f records/soak.json
	NMT_SOAK_FAULTS=$${NMT_SOAK_FAULTS:-300} NMT_SOAK_RECORD=records/soak.json $(BIN)/python -m pytest tests/test_faults.py -s

unit: $(STAMP)
	$(BIN)/python -m pytest tests

# The quick loop while editing: the unit tests without the browser, subprocess and fault-injection ones.
quick: $(STAMP)
	$(BIN)/python -m pytest -m "not slow" tests

nbval: $(STAMP)
	NMT_QUICK=1 $(BIN)/python -m pytest $(NOTEBOOK_DIRS) $(NBVAL)

lab: $(STAMP)
	$(BIN)/jupyter lab notebooks

export:
	python3 tools/export_lib.py

# For maintainers: re-execute the committed notebooks (chapters and solutions) in place, in learner mode,
# before committing.
notebooks: $(STAMP)
	$(BIN)/python tools/run_course.py --inplace --all
	$(BIN)/python tools/render_tables.py

# For teachers: grade a class (a folder with one folder per student) in an nbgrader course folder, e.g.
#   make grade ASSIGNMENT=A1 SUBMISSIONS=downloads/A1/ (course/ beside it; COURSE=... to choose), or one notebook:
#   make grade ASSIGNMENT=A1 SUBMISSION=alice/A1_attention.ipynb
grade: $(STAMP)
	@test -n "$(ASSIGNMENT)" -a -n "$(SUBMISSION)$(SUBMISSIONS)$(COURSE)" || { echo "usage: make grade ASSIGNMENT=A1|A2|A3 SUBMISSIONS=class/ [COURSE=nbgrader-course/], or SUBMISSION=notebook.ipynb"; exit 2; }
	$(BIN)/python tools/grade.py "$(ASSIGNMENT)" $(SUBMISSION) $(SUBMISSIONS) $(if $(COURSE),--course "$(COURSE)")

# For teachers: the student edition (no solutions, hidden tests or teacher's guide), to publish.
# For teachers: the assignments' student edition, assignments/, from their nbgrader sources in solutions/assignments/.
release: $(STAMP)
	$(BIN)/python tools/release.py

STUDENT_DIR ?= build/student
student:
	python3 tools/student_edition.py "$(STUDENT_DIR)"

clean:
	rm -rf build
