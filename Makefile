# Two commands on a fresh machine: `make run` and `make test` (see README.md).
VENV ?= .venv
PYTHON ?= python3
BIN := $(VENV)/bin
APT_PACKAGES := mosquitto mosquitto-clients libasound2-dev libsystemd-dev pkg-config alsa-utils gcc
TEST_APT_PACKAGES := pv pulseaudio libasound2-plugins
RUNTIME_STAMP := $(VENV)/.installed-runtime
TEST_STAMP := $(VENV)/.installed-test
SYSTEM_STAMP := $(VENV)/.installed-system
BENCH_STAMP := $(VENV)/.installed-bench
SAY_TEXT ?= Hello! Magpie is ready. It is 22°C outside, and your timer ends at 6:30.

.PHONY: run test test-fast lint bench prepare-int8 install-cuda install-service clean

$(SYSTEM_STAMP):
	@tools/ensure-system-packages.sh $(APT_PACKAGES)
	@mkdir -p $(VENV) && touch $@

$(RUNTIME_STAMP): pyproject.toml $(SYSTEM_STAMP)
	@test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/pip install -q --disable-pip-version-check -e .
	@touch $@

$(TEST_STAMP): pyproject.toml $(RUNTIME_STAMP)
	@tools/ensure-system-packages.sh $(TEST_APT_PACKAGES)
	$(BIN)/pip install -q --disable-pip-version-check -e '.[test]'
	@touch $@

run: $(RUNTIME_STAMP)
	@$(BIN)/magpie-tts prepare --no-int8
	@$(BIN)/python -m magpie_tts.tools.demo "$(SAY_TEXT)"

test: $(TEST_STAMP)
	$(BIN)/ruff check .
	$(BIN)/python -m pytest

# The fast tier for the edit-test loop: everything not marked slow (no daemon, broker or
# recognizer). CI and `make test` run everything.
test-fast: $(TEST_STAMP)
	$(BIN)/ruff check .
	$(BIN)/python -m pytest -m "not slow"

lint: $(TEST_STAMP)
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .

# INT8 needs the recognizer (test extra) for its quality gate; takes a few minutes.
prepare-int8: $(TEST_STAMP)
	$(BIN)/magpie-tts prepare

$(BENCH_STAMP): pyproject.toml $(TEST_STAMP)
	$(BIN)/pip install -q --disable-pip-version-check -e '.[test,bench]'
	@touch $@

# The peers (piper-tts and its HTTP server), then the in-process and HTTP benches.
bench: $(BENCH_STAMP)
	$(BIN)/magpie-tts bench
	$(BIN)/magpie-tts bench --concurrency 1,5,10

# GPU: onnxruntime-gpu must own the onnxruntime module (CUDA_MAJOR=12|13, JETSON_INDEX=...).
install-cuda: $(RUNTIME_STAMP)
	tools/install-gpu.sh $(BIN)/python

install-service:
	tools/install-service.sh $(if $(JETSON),--jetson)

clean:
	rm -rf $(VENV) build
