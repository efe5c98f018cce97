# The two quickstart commands. Each sets itself up on a fresh machine.
#   make verify   build, run and verify every lesson (offline where there is no GPU)
#   make test     the test suite, less the tests marked slow (pyproject.toml's markers)
# and, for CI:
#   make test-slow     the tests marked slow: nvcc builds of real lessons, waits, Chromium
#   make test-all      every test in one run
#   make test-lowest   every test on the lowest versions pyproject.toml allows
PYTHON ?= python3
VENV := .venv
STAMP := $(VENV)/.installed
# EXTRAS=test,nvml on a GPU machine; PYTEST_ARGS=--junitxml=pytest.xml in CI.
EXTRAS ?= test
PYTEST_ARGS ?=
# The suite runs on every core (pytest-xdist); PYTEST_WORKERS= runs it in one process.
PYTEST_WORKERS ?= -n auto
LOWEST_VENV := .venv-lowest
# A version (3.10) or an interpreter: uv finds it, or fetches it where it may.
LOWEST_PYTHON ?= $(PYTHON)

.PHONY: verify test test-slow test-all test-lowest clean

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(VENV)/bin/python -m pip install -q --upgrade pip
	$(VENV)/bin/python -m pip install -q -e '.[$(EXTRAS)]'
	touch $(STAMP)

verify: $(STAMP)
	@if nvidia-smi -L >/dev/null 2>&1; then \
		$(VENV)/bin/coursectl verify --all; \
	else \
		echo "no GPU here: verify --offline (builds every lesson, re-judges the recorded evidence)"; \
		$(VENV)/bin/coursectl verify --all --offline; \
	fi
	@echo "coursectl is installed in $(VENV)/bin: '. $(VENV)/bin/activate' puts it on your PATH"

test: $(STAMP)
	$(VENV)/bin/python -m pytest -q $(PYTEST_WORKERS) -m "not slow" $(PYTEST_ARGS)
	@echo "the tests marked slow were left out: make test-slow runs them, make test-all runs everything"

test-slow: $(STAMP)
	$(VENV)/bin/python -m pytest -q $(PYTEST_WORKERS) -m slow $(PYTEST_ARGS)

test-all: $(STAMP)
	$(VENV)/bin/python -m pytest -q $(PYTEST_WORKERS) $(PYTEST_ARGS)

# Every direct dependency at its lower bound (uv's lowest-direct), the build
# backend at its floor too, then the whole suite.
test-lowest: $(STAMP)
	$(VENV)/bin/python -m pip install -q uv
	rm -rf $(LOWEST_VENV)
	$(VENV)/bin/uv venv -q --python $(LOWEST_PYTHON) $(LOWEST_VENV)
	sed -n 's/^requires = \["setuptools>=\([0-9.]*\)".*/setuptools==\1/p' pyproject.toml > $(LOWEST_VENV)/build-constraints.txt
	$(VENV)/bin/uv pip install -q --python $(LOWEST_VENV)/bin/python --resolution lowest-direct \
		--build-constraint $(LOWEST_VENV)/build-constraints.txt -e '.[test]'
	$(VENV)/bin/uv pip list --python $(LOWEST_VENV)/bin/python
	$(LOWEST_VENV)/bin/python -m pytest -q $(PYTEST_WORKERS) $(PYTEST_ARGS)

clean:
	rm -rf $(VENV) $(LOWEST_VENV) .coursectl build
