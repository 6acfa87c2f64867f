# Two commands for a newcomer: `make book` builds the course, `make test` runs every test.
# Both set up .venv/ first when needed. Contributors: `make lint`, `make test-fast` (CONTRIBUTING.md).
SHELL := /bin/bash
VENV   := .venv
PY     := $(VENV)/bin/python
STAMP  := $(VENV)/.installed
AXE    := node_modules/axe-core/axe.min.js

.PHONY: notebooks-canonical setup system-packages lint test test-fast book assignments autograde autograde-unsandboxed feedback gradescope bench clean

setup: $(STAMP) $(AXE)

$(STAMP): requirements.txt pyproject.toml
	@test -x $(PY) || python3 -m venv $(VENV)
	$(PY) -m pip install -q --disable-pip-version-check -r requirements.txt
	$(PY) -m pip install -q --disable-pip-version-check --no-deps -e .
	$(PY) -m ipykernel install --sys-prefix --name python3 >/dev/null
	$(MAKE) --no-print-directory system-packages
	touch $(STAMP)

# npm packages at package-lock.json's versions (axe.min.js stands for all of them): axe-core, the accessibility checker of the browser
# test (tests/test_book.py), and onnxruntime-web, which runs chapter 7's live ViT in the page (the
# book's extension copies its WebAssembly build into the site). Without npm, setup goes on and says
# so; the book then says the live model cannot load, and the browser test fails with the same
# instruction (it never skips).
$(AXE): package.json package-lock.json
	@if command -v npm >/dev/null; then npm ci --no-audit --no-fund --ignore-scripts --loglevel=error && touch $(AXE); \
	else echo "note: npm not found, axe-core and onnxruntime-web not installed (the browser test and the live ViT of chapter 7 need them): apt-get install nodejs npm, then make setup"; fi

# Debian packages the course uses when the machine allows it: the Fashion-MNIST data,
# Chromium for the browser test of the book, bubblewrap for the grading sandbox.
# Elsewhere vitref.data downloads Fashion-MNIST with torchvision on first use.
DEB_PACKAGES := dataset-fashion-mnist chromium bubblewrap
system-packages:
	@missing=""; for p in $(DEB_PACKAGES); do dpkg -s $$p >/dev/null 2>&1 || missing="$$missing $$p"; done; \
	if [ -z "$$missing" ]; then echo "system packages present"; \
	elif command -v apt-get >/dev/null && [ "$$(id -u)" = 0 ]; then \
	  echo "installing$$missing"; apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq $$missing >/dev/null; \
	else echo "note: cannot install$$missing here (needs Debian and root); see README"; fi

# Every test: those that measure wall-clock time (marked alone) run after the others, one at a
# time, so that a second worker's load cannot make a time limit fail; the rest on 2 processes.
test: setup
	$(PY) -m pytest -m "not alone" -n 2 --durations=25
	$(PY) -m pytest -m alone -n 0 --durations=10

# The inner loop: every test not marked slow (no browser, book build, notebook runs, class
# grading in the sandbox, nbgrader, PostgreSQL or training run, or several seconds of CPU), on 2
# processes (pytest-xdist): about 110 s of CPU, under a minute on 2 idle cores (51 to 55 s measured,
# 2026-11-28).
# No fast test runs a notebook, so the nbval plugin is not loaded (-p no:nbval): loading it imports
# nbformat, whose jsonschema builds an IRI grammar for about 1.3 s in each of the 3 processes.
# FAST_ARGS adds options (e.g. FAST_ARGS="-n 0").
test-fast: setup
	$(PY) -m pytest -p no:nbval -m "not slow" -n 2 $(FAST_ARGS)

# The book's notebooks in nbformat's canonical form (what nbformat.write produces: sorted keys, one
# indent), so that a notebook edited with nbformat or Jupyter changes only what was edited.
# `make lint` checks it; `make notebooks-canonical` rewrites them.
define NOTEBOOKS_CANONICAL
import glob, sys, nbformat
paths = sorted(glob.glob("book/*.ipynb"))
canonical = {p: nbformat.writes(nbformat.read(p, 4)) + "\n" for p in paths}
if sys.argv[1:] == ["check"]:
    bad = [p for p in paths if open(p, encoding="utf-8").read() != canonical[p]]
    sys.exit(f"not in nbformat's canonical form (run make notebooks-canonical): {bad}" if bad else 0)
for p in paths:
    open(p, "w", encoding="utf-8").write(canonical[p])
endef
export NOTEBOOKS_CANONICAL

notebooks-canonical: setup
	$(PY) -c "$$NOTEBOOKS_CANONICAL"

# ruff (pyflakes, pycodestyle, the codes our `# noqa` comments name) and mypy on vitref and
# autograder/judging; configured in pyproject.toml. No `ruff format` yet: the tree is not formatted.
# actionlint on .github/workflows/ and hadolint on the Dockerfile (.hadolint.yaml): both binaries
# come in pinned pip wheels (requirements.txt), so lint downloads nothing.
lint: setup
	$(VENV)/bin/ruff check .
	$(PY) -c "$$NOTEBOOKS_CANONICAL" check
	$(VENV)/bin/mypy
	$(VENV)/bin/actionlint
	$(VENV)/bin/hadolint --config .hadolint.yaml Dockerfile

# Jupyter Book caches each notebook's outputs keyed on the notebook's code only: when vitref
# changed since the last build, drop the cache so every number and figure is recomputed.
BOOK_STAMP := _build/.vitref-stamp
book: setup
	@if [ -f $(BOOK_STAMP) ] && [ -n "$$(find vitref -name '*.py' -newer $(BOOK_STAMP))" ]; then \
	  echo "vitref changed since the last build: re-executing every chapter"; rm -rf _build/.jupyter_cache; fi
	$(VENV)/bin/jupyter-book build . --keep-going
	@touch $(BOOK_STAMP)

assignments: setup
	$(PY) -m autograder.instructor.nbtools generate

# Grading (README, "Quick start for instructors"). `make autograde` grades
# instructor/submitted/ in the grading sandbox into nbgrader's gradebook (instructor/gradebook.db)
# and exports instructor/nbgrader_grades.csv; GRADE_ARGS passes options to
# `python -m autograder grade` (e.g. GRADE_ARGS="--jobs 4 --force").
autograde: setup
	$(PY) -m autograder.instructor.nbtools autograde -- $(GRADE_ARGS)

# nbgrader's own autograde: runs every student notebook UNSANDBOXED with your rights.
autograde-unsandboxed: setup
	$(PY) -m autograder.instructor.nbtools autograde-unsandboxed

# nbgrader generate_feedback on what `make autograde` wrote: instructor/feedback/<student>/<a>/<a>.html
feedback: setup
	$(PY) -m autograder.instructor.nbtools feedback

# The Gradescope autograder zip of one assignment: dist/gradescope-<ASSIGNMENT>.zip
gradescope: setup
	@test -n "$(ASSIGNMENT)" || { echo "usage: make gradescope ASSIGNMENT=03_attention"; exit 2; }
	$(PY) -m autograder.instructor.gradescope build --assignment $(ASSIGNMENT)

bench: setup
	$(PY) -m bench

clean:
	rm -rf _build
