"""``bitforge bench gpu`` without a GPU: the refusal, the bandwidth arithmetic, the table and JSON, and the plumbing.

The measurements themselves need a CUDA GPU (bench/gpu_check.sh runs them there). What runs here: the CLI's exit 2
with its message; the pure functions (peak bandwidth, bytes moved, GB/s, speed-ups, the issue's targets) on known
numbers; the byte counts against the packed tensors the formats modules actually make; each format's kernel call,
as the suite makes it, against the dense reference under Triton's interpreter (argument order and shapes); the
end-to-end chain (RTN W4 g64 checkpoint, ``load_quantized``, ``generate``) on a tiny random Llama on the CPU; and
``bash -n`` on the script.
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
from pathlib import Path

import pytest
import torch

from bitforge.toolchain.bench import gpu
from bitforge.toolchain.cli import main

ROOT = Path(__file__).resolve().parents[1]
def test_cli_refuses_without_cuda_with_exit_2_and_says_where_the_tests_run(tmp_path, capsys, monkeypatch):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)  # the same answer on a GPU machine
    out = tmp_path / "b.json"
    code = main(["bench", "gpu", "--no-e2e", "--json", str(out)])
    err = " ".join(capsys.readouterr().err.split())
    assert code == 2
    assert "needs a CUDA GPU" in err and "TRITON_INTERPRET=1 pytest tests/llm" in err
    assert not out.exists()


def test_peak_bandwidth_is_two_transfers_per_clock_over_the_bus():
    # H100 SXM as CUDA reports it: memory clock 2,619,000 kHz, 5120-bit bus -> 2 * 2.619e9 * 640 B = 3352.32 GB/s
    assert gpu.peak_bandwidth_gbps(2_619_000, 5120) == pytest.approx(3352.32)
    assert gpu.peak_bandwidth_gbps(3_201_000, 6144) == pytest.approx(2 * 3.201e9 * 768 / 1e9)
    with pytest.raises(gpu.BitforgeError, match="must be positive"):
        gpu.peak_bandwidth_gbps(0, 5120)


def test_traffic_and_bandwidth_of_a_w4_gemv():
    fmt = gpu.FORMATS["w4g128"]
    w = gpu.weight_bytes(fmt, 4096, 4096)
    assert w == 4096 * 2048 + 2 * 2 * 4096 * 32            # codes, then float16 scale and zero per group of 128
    nbytes = gpu.traffic_bytes(w, 4096, 4096, 1)
    assert nbytes == w + 2 * 4096 + 2 * 4096                 # bf16 x in, bf16 y out
    assert gpu.gbps(nbytes, 0.002) == pytest.approx(nbytes / 2e-6 / 1e9)
    with pytest.raises(gpu.BitforgeError):
        gpu.gbps(nbytes, 0.0)


@pytest.mark.parametrize("name", list(gpu.FORMATS))
def test_weight_bytes_equal_the_random_packed_tensors_the_suite_times(name):
    fmt = gpu.FORMATS[name]
    n, k = 96, 384
    w = gpu.random_weight(fmt, n, k, torch.Generator().manual_seed(0), "cpu")
    assert gpu.stored_bytes(w) == gpu.weight_bytes(fmt, n, k)


def test_weight_bytes_equal_what_the_formats_modules_pack():
    from bitforge.runtime.formats import nvfp4, uniform
    from bitforge.runtime.formats.binary import BinaryLowRankPath
    from bitforge.runtime.llm.triton_binary import prepare_path

    n, k = 40, 256
    codes = uniform.pack_codes(torch.randint(0, 4, (n, k), dtype=torch.uint8), 2)
    assert codes.numel() + 2 * 2 * n * (k // 64) == gpu.weight_bytes(gpu.FORMATS["w2g64"], n, k)
    q = nvfp4.quantize(torch.randn(n, k), "tensor")
    stored = sum(t.numel() * t.element_size() for t in (q.codes, q.block_scales, q.global_scales))
    assert stored == gpu.weight_bytes(gpu.FORMATS["nvfp4"], n, k)
    fmt = gpu.FORMATS["littlebit2"]
    r = gpu.binary_rank(fmt, n, k)
    sign = lambda *s: torch.randint(0, 2, s).float() * 2 - 1  # noqa: E731
    path = prepare_path(BinaryLowRankPath.from_factors(torch.rand(n), sign(n, r), torch.rand(r), sign(k, r),
                                                       torch.rand(k)))
    one = sum(t.numel() * t.element_size() for t in (path.u_words, path.v_words, path.u1, path.latent, path.v2))
    assert 2 * one == gpu.weight_bytes(fmt, n, k)


def test_rotated_copies_cover_four_times_the_l2():
    assert gpu.rotated_copies(8_000_000, 60_000_000) == 30
    assert gpu.rotated_copies(500_000_000, 60_000_000) == 2        # at least two
    assert gpu.rotated_copies(1000, 60_000_000) == gpu.MAX_COPIES  # capped


def _rows(peak):
    rows = []
    for fmt, ms in (("bf16", 0.010), ("w4g128", 0.003), ("w2g64", 0.004), ("littlebit2", 0.002)):
        nbytes = gpu.traffic_bytes(gpu.weight_bytes(gpu.FORMATS[fmt], 4096, 4096), 4096, 4096, 1)
        rows.append(gpu.make_row("k", fmt, 4096, 4096, 1, ms, nbytes, "GPU", peak))
    rows.append(gpu.make_row("k", "w4g128", 4096, 4096, 4, 0.02, 10**7, "GPU", peak))
    gpu.add_speedups(rows)
    return rows


def test_rows_speedups_and_the_issue_targets():
    rows = _rows(peak=4000.0)
    w4 = rows[1]
    assert w4.shape == "4096x4096" and w4.frac_peak == pytest.approx(w4.gbps / 4000.0, abs=1e-4)
    assert w4.speedup_vs_bf16 == pytest.approx(0.010 / 0.003, abs=1e-3)
    assert rows[-1].speedup_vs_bf16 is None                  # no bf16 row at batch 4
    targets = {(d["format"], d["what"]): d for d in gpu.summary(rows)}
    assert set(targets) == {("w4g128", "frac_peak"), ("w4g128", "speedup_vs_bf16"), ("w2g64", "frac_peak"),
                            ("littlebit2", "frac_peak")}    # batch 1 only; bf16 has no target
    for d in targets.values():
        assert d["met"] == (d["value"] >= d["target"])
    assert targets[("w4g128", "speedup_vs_bf16")]["met"] is True
    assert all(d["met"] is None for d in gpu.summary(_rows(peak=None)) if d["what"] == "frac_peak")


def test_json_has_the_issue_row_fields_and_the_table_renders(tmp_path):
    from rich.console import Console

    res = gpu.BenchResult({"name": "GPU", "peak_gbps": 4000.0, "peak_source": "test"}, _rows(4000.0))
    res.e2e.append(gpu.E2ERow("m", "random", "rtn W4 g64", 16, 0.5, 32.0, 40.0, "GPU"))
    path = tmp_path / "b.json"
    gpu.write_json(res, path, "bitforge bench gpu")
    doc = json.loads(path.read_text())
    assert doc["benchmark"] == "gpu" and doc["device"]["peak_gbps"] == 4000.0
    for row in doc["rows"]:
        assert {"kernel", "format", "shape", "batch", "gbps", "frac_peak", "ms", "device"} <= set(row)
    assert doc["e2e"][0]["tokens_per_s"] == 32.0 and len(doc["summary"]["targets"]) == 4
    con = Console(record=True, width=140)
    con.print(gpu.table(res))
    text = con.export_text()
    assert "littlebit2" in text and "tokens/s" in text and "targets" in text


def test_model_label_names_the_cached_repository():
    assert gpu.model_label("/c/hub/models--meta-llama--Llama-3.2-1B/snapshots/0a1b") == "meta-llama--Llama-3.2-1B"
    assert gpu.model_label("/models/tinyllama.gguf") == "tinyllama.gguf"


def test_options_quick_and_bf16_always_first():
    p = argparse.ArgumentParser()
    gpu.add_arguments(p)
    opts = gpu.options_from_args(p.parse_args(["--quick", "--formats", "nvfp4,w4g128"]))
    assert opts.shapes == gpu.QUICK_SHAPES and opts.batches == gpu.QUICK_BATCHES
    assert opts.formats == ("bf16", "nvfp4", "w4g128")
    with pytest.raises(SystemExit):
        p.parse_args(["--formats", "w5"])
    with pytest.raises(gpu.BitforgeError, match="--batches"):
        gpu.options_from_args(p.parse_args(["--batches", "0"]))


def _dense(fmt, w, n, k):
    """The weight the kernels compute with, decoded by the formats modules (float32 ``[n, k]``)."""
    from bitforge.runtime.formats import nvfp4, uniform

    if fmt.kind in ("uniform", "lowrank"):
        codes = uniform.unpack_codes(w["codes"], fmt.bits, (n, k))
        d = uniform.dequantize(codes, w["scale"], w["zero"], fmt.group)
        return d + (w["left"].float() @ w["right"].float() if fmt.kind == "lowrank" else 0)
    if fmt.kind == "nvfp4":
        return nvfp4.dequantize(nvfp4.NVFP4Weight(w["codes"], w["block_scales"], w["global_scales"], (n, k),
                                                  "tensor"))
    return None


@pytest.mark.parametrize("batch", [1, 3])
@pytest.mark.parametrize("name", gpu.KERNEL_FORMATS)
def test_each_kernel_call_of_the_suite_computes_x_w_transpose(name, batch):
    """Under the interpreter: the call the suite times, with its first candidate configuration, on CPU tensors."""
    from bitforge.runtime.llm.triton_common import interpreting

    device = "cpu" if interpreting() else "cuda"  # TRITON_INTERPRET=0 on a GPU machine: the compiled kernels
    fmt = gpu.FORMATS[name]
    n, k = 48, 256
    w = gpu.random_weight(fmt, n, k, torch.Generator().manual_seed(1), device)
    x = torch.randn(batch, k, generator=torch.Generator().manual_seed(2)).to(device)
    kernel, fn = gpu.kernel_op(fmt, n, k, batch, gpu.candidates(fmt, batch, autotune=False)[0])
    y = fn(x, w).cpu()
    x = x.cpu()
    w = {key: (v.cpu() if isinstance(v, torch.Tensor) else v) for key, v in w.items()}
    assert y.shape == (batch, n)
    if fmt.kind == "binary":
        ref = sum(p_ref(x, p) for p in w["paths"])
    else:
        ref = x @ _dense(fmt, w, n, k).T
    assert torch.allclose(y.float(), ref, rtol=1e-4, atol=1e-4 * float(ref.abs().max())), kernel


def p_ref(x, path):
    """One binary path in factored form from its int32 sign words: ((x v2) V latent) U^T u1."""
    def signs(words, cols):
        k = torch.arange(cols)
        return (((words.to(torch.int64)[:, k // 32] >> (k % 32)) & 1) * 2 - 1).float()   # [r, cols]
    n, k = path.shape
    t = (x * path.v2.float()) @ signs(path.v_words, k).T
    return ((t * path.latent.float()) @ signs(path.u_words, n)) * path.u1.float()


def test_end_to_end_chain_on_a_tiny_random_llama_on_cpu(tmp_path):
    cfg = dict(gpu.SMOLLM2_CONFIG, vocab_size=300, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
               num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=128)
    folder = gpu.random_llama_folder(tmp_path / "tiny", cfg)
    row = gpu.bench_generate(str(folder), "tiny", "random", tmp_path, max_new_tokens=5, prompt="t1 t2 t3",
                             device="cpu")
    assert row.tokens == 5 and row.prompt_tokens == 3        # no end-of-sequence token: never stops early
    assert row.tokens_per_s > 0 and row.bf16_tokens_per_s > 0 and row.device == "cpu"
    manifest = json.loads((tmp_path / "tiny-rtn-w4g64" / "manifest.json").read_text())
    assert manifest["config"]["method"] == "rtn" and manifest["config"]["bits"] == 4
    assert manifest["config"]["group"] == 64 and len(manifest["layers"]) == 2 * 7


def test_gpu_check_script_parses():
    script = ROOT / "bench" / "gpu_check.sh"
    assert script.is_file()
    res = subprocess.run(["bash", "-n", str(script)], capture_output=True, text=True)
    assert res.returncode == 0, res.stderr
    assert os.access(script, os.X_OK)
