# The two commands of the README: `make run` and `make test`. Both create or reuse .venv.
PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
PIP := $(PY) -m pip
CONSTRAINTS := constraints.txt
MODELS ?= models
HOST ?= 127.0.0.1
PORT ?= 8000
PYTEST_ARGS ?=

.PHONY: run test install install-test lint export serve bench clean

# pip runs with -qq: its progress is nothing, and only errors show (a machine's own pip
# configuration, or setuptools' note on editable installs, would otherwise fill the screen).
PIP_QUIET ?= -qq

$(PY):
	@echo "creating $(VENV)"
	@$(PYTHON) -m venv $(VENV)
	@$(PIP) install $(PIP_QUIET) --upgrade pip

$(VENV)/.installed-run: $(PY) pyproject.toml $(CONSTRAINTS)
	@echo "installing headwise and its export tools into $(VENV) (a few minutes the first time)"
	@$(PIP) install $(PIP_QUIET) -c $(CONSTRAINTS) -e ".[export]"
	@touch $@

$(VENV)/.installed-test: $(VENV)/.installed-run
	@echo "installing the test and benchmark tools into $(VENV)"
	@$(PIP) install $(PIP_QUIET) -c $(CONSTRAINTS) -e ".[export,test,bench]"
	@touch $@

install: $(VENV)/.installed-run
install-test: $(VENV)/.installed-test

# Export the bundled all-MiniLM-L6-v2 when models/ has no package yet, then serve it.
run: install
	@if ! ls $(MODELS)/*/manifest.json >/dev/null 2>&1; then \
		$(VENV)/bin/headwise export --out $(MODELS); \
	fi
	$(VENV)/bin/headwise serve --models $(MODELS) --host $(HOST) --port $(PORT)

lint: install-test
	$(VENV)/bin/ruff check .
	$(VENV)/bin/lint-imports

test: install-test lint
	$(VENV)/bin/pytest $(PYTEST_ARGS)

bench: install-test
	$(VENV)/bin/headwise bench

clean:
	rm -rf $(VENV) .pytest_cache .ruff_cache
