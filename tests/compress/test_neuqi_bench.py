"""``bitforge bench neuqi``: configuration parsing, and the per-setting sums on synthetic layers (the real model runs
in the benchmark itself)."""
from __future__ import annotations

import pytest
import torch

from bitforge.toolchain.cli import main
from bitforge.toolchain.compress.neuqi import NeuqiConfig
from bitforge.toolchain.compress.neuqi_bench import Layer, measure, parse_configs, parse_settings
from bitforge.toolchain.errors import BitforgeError

pytestmark = pytest.mark.usefixtures("one_thread")


def test_configs_are_neuqi_config_overrides():
    default, one, both = parse_configs("default; exact_top=1 ;coarse=8,exhaustive=true")
    assert default.config == NeuqiConfig() and one.config == NeuqiConfig(exact_top=1)
    assert both.name == "coarse=8,exhaustive=true" and both.config == NeuqiConfig(coarse=8, exhaustive=True)
    with pytest.raises(BitforgeError, match="'speed=2'.*KEY one of T, coarse"):
        parse_configs("default;speed=2")
    with pytest.raises(BitforgeError, match="coarse=x"):
        parse_configs("coarse=x")
    with pytest.raises(BitforgeError, match="exhaustive=2: expected true or false"):
        parse_configs("exhaustive=2")
    with pytest.raises(BitforgeError, match="coarse=1.5: expected an integer"):
        parse_configs("coarse=1.5")
    with pytest.raises(BitforgeError, match="NeUQI search: coarse >= 2"):
        parse_configs("coarse=1")
    assert parse_settings("3:64, 2:ch") == [(3, 64), (2, None)]
    with pytest.raises(BitforgeError, match="BITS:GROUP"):
        parse_settings("3")


def test_measure_sums_loss_and_time_per_setting_with_ratios_to_rtn_and_the_first_config():
    g = torch.Generator().manual_seed(0)
    layers = []
    for k, (out, n_in) in enumerate(((48, 128), (32, 64))):
        W = torch.randn(out, n_in, generator=g) * torch.exp(torch.randn(n_in, generator=g))  # uneven columns
        h = torch.exp(2 * torch.randn(n_in, generator=g))
        layers.append(Layer(f"l{k}", W, h / h.mean()))
    rows = measure(layers, [(3, 32), (2, None)], parse_configs("default;exhaustive=true"))
    assert [(r.bits, r.group, r.variant) for r in rows] == [
        (3, 32, "rtn"), (3, 32, "default"), (3, 32, "exhaustive=true"),
        (2, None, "rtn"), (2, None, "default"), (2, None, "exhaustive=true")]
    for rtn, default, exhaustive in (rows[:3], rows[3:]):
        assert rtn.loss_vs_rtn == 1.0 and rtn.time_vs_rtn == 1.0
        assert default.loss_vs_rtn < 0.9 and default.loss_vs_first == 1.0
        assert exhaustive.loss_vs_first <= 1.0 + 1e-6  # exact z at every candidate cannot lose to Lloyd scoring
        assert default.seconds > 0 and default.time_vs_rtn == pytest.approx(default.seconds / rtn.seconds)


def test_bench_neuqi_bad_blocks_and_configs_are_clear_errors(capsys):
    assert main(["bench", "neuqi", "--neuqi-configs", "default;fast=1"]) == 2
    assert "--neuqi-configs: 'fast=1'" in capsys.readouterr().err
    assert main(["bench", "neuqi", "--neuqi-blocks", "a,b"]) == 2
    assert "--neuqi-blocks 'a,b'" in capsys.readouterr().err
