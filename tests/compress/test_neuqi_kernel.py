"""The compiled NeUQI search (neuqi_search.c) against its PyTorch reference (neuqi.py) and against brute force."""
from __future__ import annotations

import pytest
import torch
from bitforge.toolchain.compress import neuqi_kernel
from bitforge.toolchain.compress.neuqi import NeuqiConfig, exact_zero, neuqi_params, quantize_neuqi, weighted_loss
from bitforge.toolchain.compress.uniform import quantize_uniform

from test_neuqi import _brute_force, _heavy_tailed, _loss_at


@pytest.fixture(scope="module")
def lib():
    lib = neuqi_kernel.library()
    assert lib is not None, "the C kernel did not build (is a C compiler installed? `make setup` needs one)"
    return lib


@pytest.mark.parametrize("q", [3, 7, 15])
@pytest.mark.parametrize("spread", [0.5, 1.0, 4.0, 12.0])
def test_kernel_exact_zero_matches_brute_force_and_the_reference(lib, q, spread):
    gen = torch.Generator().manual_seed(q * 100 + int(spread * 10))
    G, n = 40, 9
    x = torch.randn(G, n, generator=gen)
    x = x / (x.amax(-1, keepdim=True) - x.amin(-1, keepdim=True)) * q * spread + 50 * torch.randn(G, 1, generator=gen)
    h = torch.rand(G, n, generator=gen) ** 3
    h[0, :4] = 0.0
    loss, z = neuqi_kernel.exact_zero(lib, x, h, q)
    direct = _loss_at(x, h, q, z.double())
    bf = _brute_force(x, h, q)
    assert torch.allclose(loss.double(), direct, rtol=1e-4, atol=1e-6)
    assert (direct <= bf * (1 + 1e-5) + 1e-9).all()
    ref, _ = exact_zero(x, h, q)
    # float32 sums in another order: the same optimum to float32 precision of the loss' terms
    assert torch.allclose(loss, ref, rtol=1e-5, atol=1e-6 * float(h.sum(-1).max()))


@pytest.mark.parametrize("n", [64, 100, 300])
def test_kernel_exact_zero_on_groups_of_any_size(lib, n):
    """Phases are ranked by counting up to 256 elements and sorted by qsort above; both give the exact optimum."""
    gen = torch.Generator().manual_seed(n)
    x = torch.randn(6, n, generator=gen) * 2.5 + 3.5
    h = torch.rand(6, n, generator=gen) + 0.01
    loss, z = neuqi_kernel.exact_zero(lib, x, h, 7)
    ref, _ = exact_zero(x, h, 7)
    assert torch.allclose(loss.double(), _loss_at(x, h, 7, z.double()), rtol=1e-4)
    assert torch.allclose(loss, ref, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("bits,group,cols", [(2, 32, 128), (3, 64, 256), (4, None, 100), (4, None, 300), (3, 64, 576)])
@pytest.mark.parametrize("opts", [{}, {"exact_top": 2, "starts": 1}, {"lloyd_iters": 3, "starts": 3, "refine": 16}])
def test_compiled_search_agrees_with_the_pytorch_search(bits, group, cols, opts):
    """Same algorithm, float32 sums in another order: groups whose Lloyd scores tie to float32 precision may end on
    another scale, but only where the two results are near ties on the exact objective too (each such group within
    0.5 %), and the objective over the layer agrees to 1e-4."""
    W = _heavy_tailed(48, cols, bits + cols)
    h = torch.rand(cols, generator=torch.Generator().manual_seed(cols)) ** 2 + 0.01
    sc, zc = neuqi_params(W, h, bits, group, NeuqiConfig(**opts))
    st, zt = neuqi_params(W, h, bits, group, NeuqiConfig(**opts, compiled=False))
    same = sc == st
    assert same.float().mean() >= 0.9
    assert torch.allclose(zc[same], zt[same], rtol=1e-3, atol=1e-3)

    def loss(s, z):
        return weighted_loss(W, quantize_uniform(W, bits, group, s, z).dequantize(), h, group)

    ours, ref = loss(sc, zc), loss(st, zt)
    assert torch.allclose(ours[~same], ref[~same], rtol=5e-3)
    assert float(ours.sum()) == pytest.approx(float(ref.sum()), rel=1e-4)


def test_compiled_search_is_deterministic_across_thread_counts():
    """Groups are independent and every sum has a fixed order: 1 or 3 threads give the same bits."""
    W = _heavy_tailed(37, 192, 4)
    h = torch.rand(192, generator=torch.Generator().manual_seed(8)) + 0.05
    threads = torch.get_num_threads()
    try:
        runs = []
        for t in (1, 3):
            torch.set_num_threads(t)
            runs.append(neuqi_params(W, h, 3, 64))
    finally:
        torch.set_num_threads(threads)
    assert torch.equal(runs[0][0], runs[1][0]) and torch.equal(runs[0][1], runs[1][1])


def test_compiled_search_keeps_neuqi_better_than_rtn():
    W = _heavy_tailed(48, 256, 7)
    h = torch.rand(256, generator=torch.Generator().manual_seed(2)) ** 2 + 0.01
    ours = weighted_loss(W, quantize_neuqi(W, h, 2, 64).dequantize(), h, 64).sum()
    rtn = weighted_loss(W, quantize_uniform(W, 2, 64).dequantize(), h, 64).sum()
    assert ours < 0.75 * rtn


def test_build_is_cached_and_keyed_by_the_source(tmp_path, monkeypatch):
    first = neuqi_kernel.build(tmp_path)
    assert first.is_file() and neuqi_kernel.build(tmp_path) == first
    assert [p.name for p in first.parent.iterdir()] == ["neuqi_search.so"]       # no temporary left behind
    edited = tmp_path / "neuqi_search.c"
    edited.write_text(neuqi_kernel.SOURCE.read_text() + "\n/* edited */\n")
    monkeypatch.setattr(neuqi_kernel, "SOURCE", edited)
    assert neuqi_kernel.build(tmp_path) != first


def test_without_a_compiler_the_pytorch_search_runs_with_a_warning(tmp_path, monkeypatch):
    monkeypatch.setenv("CC", "no-such-compiler-bitforge")
    monkeypatch.setenv("BITFORGE_CACHE", str(tmp_path))
    neuqi_kernel.library.cache_clear()
    try:
        with pytest.warns(RuntimeWarning, match="compiled search is unavailable.*no C compiler"):
            assert neuqi_kernel.library() is None
        W = _heavy_tailed(8, 64, 1)
        h = torch.rand(64, generator=torch.Generator().manual_seed(1)) + 0.1
        fallback = neuqi_params(W, h, 3, 32)
        reference = neuqi_params(W, h, 3, 32, NeuqiConfig(compiled=False))
        assert torch.equal(fallback[0], reference[0]) and torch.equal(fallback[1], reference[1])
    finally:
        neuqi_kernel.library.cache_clear()


def test_a_compile_error_names_the_compiler_and_the_source(tmp_path, monkeypatch):
    broken = tmp_path / "neuqi_search.c"
    broken.write_text("this is not C\n")
    monkeypatch.setattr(neuqi_kernel, "SOURCE", broken)
    with pytest.raises(RuntimeError, match="failed on neuqi_search.c"):
        neuqi_kernel.build(tmp_path / "cache")
    assert not list((tmp_path / "cache").rglob("*.so"))
