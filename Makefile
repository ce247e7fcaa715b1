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

.PHONY: run test install install-test lint export serve bench clean image image-gpu image-prometheus base-image

# pip runs with -qq: its progress is nothing, and only errors show (a machine's own pip
# configuration, or setuptools' note on editable installs, would otherwise fill the screen).
PIP_QUIET ?= -qq

$(PY):
	@echo "creating $(VENV)"
	@$(PYTHON) -m venv $(VENV)
	@$(PIP) install $(PIP_QUIET) --upgrade pip

$(VENV)/.installed-run: $(PY) pyproject.toml $(CONSTRAINTS)
	@echo "installing headwise and its export tools into $(VENV) (a few minutes the first time)"
	@$(PIP) install $(PIP_QUIET) -c $(CONSTRAINTS) -e ".[export,otel]"
	@touch $@

$(VENV)/.installed-test: $(VENV)/.installed-run
	@echo "installing the test and benchmark tools into $(VENV)"
	@$(PIP) install $(PIP_QUIET) -c $(CONSTRAINTS) -e ".[export,test,bench,otel]"
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

# ------------------------------------------------------------------ images (docs/deployment.md)
# `make image`: headwise:cpu. The model package is exported here, outside any image (torch
# stays on this side), into IMAGE_MODELS unless a package is there already; docker/build.sh
# then builds docker/Dockerfile with BuildKit on BASE: auto (python:3.11-slim-bookworm from
# Docker Hub, else the local Debian base docker/make-base.sh makes), local, or any image.
# CHECKPOINT=path/to/hf-checkpoint [MODEL_NAME=name]: export that checkpoint instead (into an
# empty IMAGE_MODELS: rm -rf build/image first). ONNXRUNTIME: onnxruntime (the default, the
# CPU-only wheel constraints.txt pins) or onnxruntime-gpu (about 300 MB more, the same answers).
IMAGE ?= headwise:cpu
IMAGE_GPU ?= headwise:gpu
IMAGE_MODELS ?= build/image/models
IMAGE_MODELS_GPU ?= build/image/models-gpu
# The CPU serves fp32 (the default) or int8 (HEADWISE_PRECISION=int8); the GPU fp32 or fp16.
IMAGE_EXPORT_ARGS ?= --int8 --no-fp16
IMAGE_GPU_EXPORT_ARGS ?= --fp16 --no-int8
BASE ?= auto
# Where nvidia/cuda cannot be pulled: a stand-in base for Dockerfile.gpu's stages, e.g. the local
# Debian base local/python:3.11-bookworm (made when missing); docs/deployment.md says what it proves.
BASE_GPU ?=
ONNXRUNTIME ?= onnxruntime
CHECKPOINT ?=
MODEL_NAME ?=

define export-package
	@if ! ls $(1)/*/manifest.json >/dev/null 2>&1; then \
		$(MAKE) --no-print-directory install && \
		echo "exporting the model package into $(1) (a minute or two)" && \
		$(VENV)/bin/headwise export $(CHECKPOINT) $(if $(MODEL_NAME),--name $(MODEL_NAME)) \
			--out $(1) $(2); \
	elif [ -n "$(CHECKPOINT)" ]; then \
		echo "make: $(1) already holds a package; rm -rf $(1) to export $(CHECKPOINT) instead" >&2; \
		exit 1; \
	fi
endef

image:
	$(call export-package,$(IMAGE_MODELS),$(IMAGE_EXPORT_ARGS))
	IMAGE=$(IMAGE) BASE=$(BASE) MODELS=$(IMAGE_MODELS) ONNXRUNTIME=$(ONNXRUNTIME) docker/build.sh

image-gpu:
	$(call export-package,$(IMAGE_MODELS_GPU),$(IMAGE_GPU_EXPORT_ARGS))
	$(if $(filter local/python:3.11-bookworm,$(BASE_GPU)),docker/make-base.sh)
	IMAGE=$(IMAGE_GPU) BASE=none DOCKERFILE=docker/Dockerfile.gpu MODELS=$(IMAGE_MODELS_GPU) \
		BUILD_ARGS="$(if $(BASE_GPU),--build-arg CUDA_IMAGE=$(BASE_GPU))" docker/build.sh

# Prometheus from Debian's package, for compose where prom/prometheus cannot be pulled.
PROMETHEUS_IMAGE ?= headwise/prometheus:debian
image-prometheus:
	IMAGE=$(PROMETHEUS_IMAGE) BASE=$(BASE) HUB_BASE=debian:bookworm-slim MODELS=none \
		DOCKERFILE=docker/Dockerfile.prometheus CONTEXT=docker/prometheus docker/build.sh

# The local Debian base (mmdebstrap), remade even when present.
base-image:
	FORCE=1 docker/make-base.sh

clean:
	rm -rf $(VENV) .pytest_cache .ruff_cache build/image
