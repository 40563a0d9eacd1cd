"""HSTU and DCNv2: analytic FLOPs within 2% of torch's FlopCounterMode (forward + backward) for every preset, the
DCNv2 cross layer against TorchRec's own `LowRankCrossNet` where its source is on this machine, ids out of range
refused naming the table."""

from __future__ import annotations

import importlib.util

import pytest
import torch
from torch.utils.flop_counter import FlopCounterMode

from suite.models.recsys import dcnv2, hstu
from suite.models.recsys.tables import IdOutOfRange

HSTU_META = {"cardinality": {"user": 30, "item": 60, "rating": 7}, "max_history": 12}
DCN_META = {"cardinality": {"a": 40, "b": 70, "genres": 9}, "sparse_features": ["a", "b"],
            "multi_features": ["genres"], "n_dense": 4}


def _hstu_batch(b: int, n_hist: int, device: str = "cpu") -> dict[str, torch.Tensor]:
    g = torch.Generator().manual_seed(0)
    hist = torch.randint(1, 60, (b, n_hist), generator=g)
    hist[:, : n_hist // 3] = 0  # left padding, as the reader writes it
    return {k: v.to(device) for k, v in {
        "user": torch.randint(1, 30, (b,), generator=g), "hist_item": hist,
        "hist_rating": torch.where(hist > 0, torch.randint(1, 6, (b, n_hist), generator=g), 0),
        "hist_time": torch.where(hist > 0, 881_250_949 + torch.arange(n_hist) * 4_000, 0),
        "query_time": torch.full((b,), 881_250_949 + (n_hist - 1) * 4_000),
        "cand_item": torch.randint(1, 60, (b,), generator=g)}.items()}


def _counted(model: torch.nn.Module, batch: dict[str, torch.Tensor]) -> float:
    with FlopCounterMode(display=False) as counter:
        model(batch).sum().backward()
    return counter.get_total_flops()


@pytest.mark.parametrize("preset", ["tiny", "cpu", "full"])
def test_hstu_flops_match_flop_counter(preset: str) -> None:
    cfg = hstu.Config(preset=preset)
    meta = dict(HSTU_META, max_history=12 if preset != "full" else 6)
    model = hstu.build(cfg, meta)  # full widths (512, 4 x 128) over small tables and a short history: a few MB
    b = 3
    counted = _counted(model, _hstu_batch(b, meta["max_history"])) / b
    assert counted == pytest.approx(hstu.flops_per_sample(cfg, meta), rel=0.02)


@pytest.mark.parametrize("preset", ["tiny", "cpu", "full"])
def test_dcnv2_flops_match_flop_counter(preset: str) -> None:
    cfg = dcnv2.Config(preset=preset)
    model = dcnv2.build(cfg, DCN_META)
    batch = {"dense": torch.rand(5, 4), "sparse": torch.randint(1, 40, (5, 2)),
             "multi:genres": torch.randint(0, 9, (5, 3))}
    counted = _counted(model, batch) / 5
    assert counted == pytest.approx(dcnv2.flops_per_sample(cfg, DCN_META), rel=0.02)


def test_the_flop_formula_can_fail() -> None:
    """Negative control: one more HSTU layer in the formula than in the model is far outside 2%."""
    cfg = hstu.Config(preset="cpu")
    model = hstu.build(cfg, HSTU_META)
    counted = _counted(model, _hstu_batch(2, 12)) / 2
    wrong = hstu.Config(preset="cpu", num_layers=3)
    assert counted != pytest.approx(hstu.flops_per_sample(wrong, HSTU_META), rel=0.02)


def test_full_presets_are_the_references() -> None:
    full = hstu.Config(preset="full")
    assert (full.num_heads, full.linear_dim, full.qk_dim, full.num_layers, full.embedding_dim, full.d_model,
            full.preprocessor_hidden, full.mlp_hidden) == (4, 128, 128, 5, 512, 512, 256, 512)
    d = dcnv2.Config(preset="full")
    assert (d.embedding_dim, d.bottom_mlp, d.top_mlp, d.cross_layers, d.low_rank) == (
        128, [512, 256, 128], [1024, 1024, 512, 256, 1], 3, 512)
    assert hstu.Config(preset="tiny", num_layers=2).num_layers == 2  # a field set wins over the preset


def test_ids_out_of_range_are_refused_naming_the_table() -> None:
    model = hstu.build(hstu.Config(preset="tiny"), HSTU_META)
    batch = _hstu_batch(2, 12)
    batch["cand_item"] = torch.tensor([3, 60])  # the item table has 60 rows: 60 is one past the end
    with pytest.raises(IdOutOfRange, match="table 'item'.*60"):
        model(batch)


def _torchrec_crossnet():
    """TorchRec 1.9.2's own crossnet.py (pure torch), from the source install_data.sh keeps; TorchRec's package
    import needs fbgemm-gpu, whose CPU build 1.9.0 does not load beside torch 2.13 (undefined symbol)."""
    from suite.data.locate import registry_dir

    path = registry_dir("torchrec") / "torchrec/modules/crossnet.py"
    if not path.is_file():
        pytest.skip(f"{path} missing: run `make data` (scripts/install_data.sh keeps TorchRec's crossnet.py)")
    spec = importlib.util.spec_from_file_location("torchrec_crossnet_reference", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.LowRankCrossNet


def test_cross_layer_equals_torchrecs() -> None:
    reference_cls = _torchrec_crossnet()
    torch.manual_seed(0)
    ours = dcnv2.LowRankCrossNet(in_features=24, num_layers=3, low_rank=5)
    for b in ours.bias:
        torch.nn.init.normal_(b)  # non-zero biases, so the test sees where they are added
    reference = reference_cls(in_features=24, num_layers=3, low_rank=5)
    reference.load_state_dict(ours.state_dict())  # same names, same shapes: strict load
    x = torch.randn(7, 24)
    torch.testing.assert_close(ours(x), reference(x), rtol=1e-6, atol=1e-6)
    with torch.no_grad():  # negative control: one weight changed breaks the match
        reference.W_kernels[1][3, 2] += 0.1
    assert not torch.allclose(ours(x), reference(x), rtol=1e-6, atol=1e-6)
