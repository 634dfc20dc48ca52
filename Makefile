# Two-command set-up: `make demo` and `make test` create .venv with the machine's python3 when it
# is missing, install gradtx (editable) with what they need, then run.
PYTHON ?= python3
VENV   := .venv
PY     := $(VENV)/bin/python
# constraints.txt pins the tested set for Python >= 3.11; a venv of Python 3.10 (PYTHON=python3.10)
# takes the oldest supported set, constraints-oldest.txt.
CONSTRAINTS = $(shell $(PY) -c 'import sys; print("constraints.txt" if sys.version_info >= (3, 11) else "constraints-oldest.txt")')
PIP    = $(PY) -m pip install --quiet --disable-pip-version-check -c $(CONSTRAINTS)
# A failed install removes the venv, so that the next run starts afresh instead of reusing it.
BROKEN = { rm -rf $(VENV); echo "make: installing into $(VENV) failed; removed it (PYTHON=$(PYTHON))" >&2; exit 1; }
# Test references installed without their dependencies (tests/contrib/author_packages.py loads
# them): apollo-torch and fira import bitsandbytes / transformers at package level, which their
# optimizers do not use; NVIDIA's emerging-optimizers (NorMuon) declares Python >= 3.12 only for
# typing.override and imports triton for CUDA kernels the tests do not run.
# A stamp per extras set: re-installs when pyproject.toml or constraints.txt change.
STAMP_TEST  := $(VENV)/.stamp-test
STAMP_DEMO  := $(VENV)/.stamp-demo
# `make pytest` runs its lanes at once (tests/lanes.py): the main one on 2 xdist workers, the
# tests that start processes, and the version lanes (a representative subset on the oldest
# supported set, Python 3.10 with constraints-oldest.txt, and on what pip resolves today with no
# pins, Python 3.12), each in a venv of its own; VERSION_LANES= skips those. PYTEST_ARGS go to
# every lane (e.g. PYTEST_ARGS="-k adam" or "--workers 4").
PYTEST_ARGS ?=
VERSION_LANES ?= oldest newest
PYTHON_OLDEST ?= $(shell .ci/find-python 3.10)
PYTHON_NEWEST ?= $(shell .ci/find-python 3.12)

.PHONY: test check demo bench docs lint typecheck pytest format clean optax-suite

$(PY):
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --disable-pip-version-check --upgrade pip

$(STAMP_TEST): $(PY) pyproject.toml constraints.txt
	$(PIP) -e '.[test,all,docs]' || $(BROKEN)
	$(PIP) --no-deps apollo-torch fira || $(BROKEN)
	$(PIP) --no-deps --ignore-requires-python emerging-optimizers || $(BROKEN)
	touch $@

$(STAMP_DEMO): $(PY) pyproject.toml constraints.txt constraints-oldest.txt
	$(PIP) -e '.[demo]' || $(BROKEN)
	touch $@

# The version lanes' venvs, each built whole or removed.
.venv-oldest/.stamp: pyproject.toml constraints-oldest.txt
	rm -rf .venv-oldest
	$(PYTHON_OLDEST) -m venv .venv-oldest && .venv-oldest/bin/python -m pip install --quiet \
	  --disable-pip-version-check -c constraints-oldest.txt -e '.[test-lanes]' \
	  || { rm -rf .venv-oldest; echo "make: building .venv-oldest with $(PYTHON_OLDEST) failed (set PYTHON_OLDEST= or VERSION_LANES=)" >&2; exit 1; }
	touch $@

.venv-newest/.stamp: pyproject.toml
	rm -rf .venv-newest
	$(PYTHON_NEWEST) -m venv .venv-newest && .venv-newest/bin/python -m pip install --quiet \
	  --disable-pip-version-check -e '.[test-lanes]' \
	  || { rm -rf .venv-newest; echo "make: building .venv-newest with $(PYTHON_NEWEST) failed (set PYTHON_NEWEST= or VERSION_LANES=)" >&2; exit 1; }
	touch $@

# The venvs (pip unpacking wheels), lint and types at once, each one's output kept together;
# then the lanes, which end with each lane's wall and CPU seconds against the test-time budget
# and the ten slowest test files (tests/lanes.py, BUDGET_CPU_S).
test:
	$(MAKE) --no-print-directory -j3 --output-sync=target lint typecheck \
	  $(foreach l,$(VERSION_LANES),.venv-$(l)/.stamp)
	$(MAKE) --no-print-directory pytest

# The inner loop (tests/check.py): lint and types, the tests of what changed against HEAD (and
# the untracked files), mapped from the changed files to their tests, and a one-minute smoke of
# the optimizer table. CHECK_ARGS: e.g. "--base origin/main", "--dry-run", or files to check.
CHECK_ARGS ?=
check: $(STAMP_TEST)
	$(PY) -m tests.check $(CHECK_ARGS)

lint: $(STAMP_TEST)
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .
	$(VENV)/bin/lint-imports

typecheck: $(STAMP_TEST)
	$(VENV)/bin/mypy

pytest: $(STAMP_TEST) $(foreach l,$(VERSION_LANES),.venv-$(l)/.stamp)
	$(PY) -m tests.lanes $(foreach l,$(VERSION_LANES),--python $(l)=.venv-$(l)/bin/python) $(PYTEST_ARGS)

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
	rm -rf $(VENV) .venv-oldest .venv-newest .pytest_cache .mypy_cache .ruff_cache build dist site *.egg-info
