# Two-command set-up: `make demo` and `make test` create .venv with the machine's python3 when it
# is missing, install gradtx (editable) with what they need, then run.
PYTHON ?= python3
VENV   := .venv
PY     := $(VENV)/bin/python
PIP    := $(PY) -m pip install --quiet --disable-pip-version-check -c constraints.txt
# A stamp per extras set: re-installs when pyproject.toml or constraints.txt change.
STAMP_TEST  := $(VENV)/.stamp-test
STAMP_DEMO  := $(VENV)/.stamp-demo
# `make pytest` runs two lanes at once (tests/lanes.py): the main one on 2 xdist workers and the
# tests that start processes; PYTEST_ARGS go to both (e.g. PYTEST_ARGS="-k adam" or "--workers 4").
PYTEST_ARGS ?=

.PHONY: test demo bench docs lint typecheck pytest format clean optax-suite

$(PY):
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --disable-pip-version-check --upgrade pip

$(STAMP_TEST): $(PY) pyproject.toml constraints.txt
	$(PIP) -e '.[test,all,docs]'
	touch $@

$(STAMP_DEMO): $(PY) pyproject.toml constraints.txt
	$(PIP) -e '.[demo]'
	touch $@

test: $(STAMP_TEST)
	$(MAKE) --no-print-directory lint typecheck pytest

lint: $(STAMP_TEST)
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .
	$(VENV)/bin/lint-imports

typecheck: $(STAMP_TEST)
	$(VENV)/bin/mypy

pytest: $(STAMP_TEST)
	$(PY) -m tests.lanes $(PYTEST_ARGS)

format: $(STAMP_TEST)
	$(VENV)/bin/ruff format .
	$(VENV)/bin/ruff check --fix .

demo: $(STAMP_DEMO)
	$(PY) -m gradtx demo

# Optax's own tests (from the installed optax wheel), run plain and with gradtx substituted for
# every public Optax name it shares; prints touched / passed / regressions per file. OPTAX_SUITE_ARGS
# narrows it (e.g. OPTAX_SUITE_ARGS="--files 'transforms/*'"); tests/test_optax_suite.py runs the
# CI subset.
optax-suite: $(STAMP_TEST)
	$(PY) -m tests.optax_suite $(OPTAX_SUITE_ARGS)

bench: $(STAMP_TEST)
	$(PY) -m benchmarks

# The documentation site (mkdocs.yml), warnings as errors, into site/.
docs: $(STAMP_TEST)
	NO_MKDOCS_2_WARNING=1 $(VENV)/bin/mkdocs build --strict --site-dir site

# The sdist and the wheel, into dist/ (git-ignored; emptied first so twine checks only these),
# built as a release would be (an isolated build environment; the wheel from the sdist), and
# their metadata checked. tests/test_wheel.py installs such a wheel into a fresh venv.
.PHONY: dist
dist: $(STAMP_TEST)
	rm -rf dist
	$(PY) -m build --outdir dist .
	$(VENV)/bin/twine check --strict dist/*

clean:
	rm -rf $(VENV) .pytest_cache .mypy_cache .ruff_cache build dist site *.egg-info
