# The two quickstart commands. Each sets itself up on a fresh machine.
#   make verify   build, run and verify every lesson (offline where there is no GPU)
#   make test     the test suite
PYTHON ?= python3
VENV := .venv
STAMP := $(VENV)/.installed

.PHONY: verify test clean

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(VENV)/bin/python -m pip install -q --upgrade pip
	$(VENV)/bin/python -m pip install -q -e '.[test]'
	touch $(STAMP)

verify: $(STAMP)
	@if nvidia-smi -L >/dev/null 2>&1; then \
		$(VENV)/bin/coursectl verify --all; \
	else \
		echo "no GPU here: verify --offline (builds every lesson, re-judges the recorded evidence)"; \
		$(VENV)/bin/coursectl verify --all --offline; \
	fi

test: $(STAMP)
	$(VENV)/bin/python -m pytest -q

clean:
	rm -rf $(VENV) .coursectl build
