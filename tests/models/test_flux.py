"""The Flux-style DiT (suite/models/flux/model.py): forward parity with torchtitan 0.3.0's `flux` model on identical
weights, analytic FLOPs against FlopCounterMode, patchify round trip, presets and refused shapes."""

from __future__ import annotations

import dataclasses
import importlib.util
import sys
import types
from copy import deepcopy

import pytest
import torch
from pydantic import ValidationError

from suite.measure import flops
from suite.models.flux import model as flux

torch.set_num_threads(1)
META = {"latent_shape": (1, 8, 8), "conditioning": {"label": {"context_dim": 10, "vec_dim": 10, "tokens": 1}}}
TINY = {"preset": "flux-tiny", "conditioning": "label"}


def _inputs(cfg: flux.Config, batch: int = 3, seed: int = 0):
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(batch, 1, 8, 8, generator=g)
    return (flux.pack(x, cfg.patch_size), flux.image_ids(batch, 8, 8, cfg.patch_size).clone(),
            torch.randn(batch, 1, 10, generator=g), torch.zeros(batch, 1, 3), torch.rand(batch, generator=g),
            torch.randn(batch, 10, generator=g))


def _randomize(model: torch.nn.Module) -> None:
    """The zero-initialised modulation and output layers would hide every block: random weights everywhere."""
    g = torch.Generator().manual_seed(1)
    with torch.no_grad():
        for p in model.parameters():
            p.copy_(torch.randn(p.shape, generator=g) * 0.2 + (1.0 if p.dim() == 1 and p.shape[0] == 16 else 0.0))


def _torchtitan_tiny(cfg: flux.Config):
    """torchtitan's flux-debug config, narrowed to the tiny shape with its own config helpers."""
    if importlib.util.find_spec("torchtitan") is None:
        pytest.skip("torchtitan is not installed (the `titan` extra)")
    if importlib.util.find_spec("datasets") is None:
        # torchtitan.models.flux's package imports its data loader (Hugging Face `datasets`) first; the model
        # itself does not use it. Only the names it imports are stubbed.
        stub, dist = types.ModuleType("datasets"), types.ModuleType("datasets.distributed")
        stub.Dataset, stub.load_dataset, dist.split_dataset_by_node = object, None, None  # type: ignore[attr-defined]
        sys.modules.setdefault("datasets", stub)
        sys.modules.setdefault("datasets.distributed", dist)
    import torchtitan.models.flux as tf
    from torchtitan.models.common.linear import Linear

    h, r, ctx, vec, inc = cfg.hidden_size, cfg.mlp_ratio, 10, 10, 4

    def lin(i: int, o: int, init: dict) -> Linear.Config:
        return Linear.Config(in_features=i, out_features=o, bias=True, param_init=init)

    dbl = tf._make_double_block_config(hidden_size=h, num_heads=cfg.num_heads, mlp_ratio=r, qkv_bias=True)
    sgl = tf._make_single_block_config(hidden_size=h, num_heads=cfg.num_heads, mlp_ratio=r)
    axes = tuple(cfg.axes_dim)
    c = dataclasses.replace(
        tf._flux_debug(), in_channels=inc, out_channels=inc, vec_in_dim=vec, context_in_dim=ctx, hidden_size=h,
        mlp_ratio=r, num_heads=cfg.num_heads, depth=cfg.depth, depth_single_blocks=cfg.depth_single_blocks,
        axes_dim=axes, theta=cfg.theta, img_in=lin(inc, h, tf._XAVIER_LINEAR), txt_in=lin(ctx, h, tf._XAVIER_LINEAR),
        pe_config=tf.EmbedND.Config(dim=cfg.head_dim, theta=cfg.theta, axes_dim=axes),
        time_in_config=tf.MLPEmbedder.Config(in_dim=256, hidden_dim=h, in_layer=lin(256, h, tf._NORMAL_02),
                                             out_layer=lin(h, h, tf._NORMAL_02)),
        vector_in_config=tf.MLPEmbedder.Config(in_dim=vec, hidden_dim=h, in_layer=lin(vec, h, tf._NORMAL_02),
                                               out_layer=lin(h, h, tf._NORMAL_02)),
        double_blocks=[deepcopy(dbl) for _ in range(cfg.depth)],
        single_blocks=[deepcopy(sgl) for _ in range(cfg.depth_single_blocks)],
        final_layer_config=tf.LastLayer.Config(hidden_size=h, patch_size=1, out_channels=inc,
                                               linear=lin(h, inc, tf._ZERO_LINEAR),
                                               adaln_linear=lin(h, 2 * h, tf._ZERO_LINEAR)))
    return c.build()


def test_forward_matches_torchtitan_flux_on_identical_weights():
    cfg = flux.Config.model_validate({**TINY, "depth": 2, "depth_single_blocks": 2})
    theirs = _torchtitan_tiny(cfg)
    _randomize(theirs)
    ours = flux.build(cfg, META)
    missing, unexpected = ours.load_state_dict(theirs.state_dict(), strict=True)
    assert not missing and not unexpected
    args = _inputs(cfg)
    with torch.no_grad():
        want, got = theirs(*args), ours(*args)
    assert want.shape == got.shape == (3, 16, 4)
    assert want.abs().mean() > 0.1  # every block contributes (no zero gate hides a difference)
    torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-5)
    # the check can fail: one block's weight changed moves the output
    with torch.no_grad():
        ours.single_blocks[1].linear2.weight.mul_(1.01)
        assert not torch.allclose(ours(*args), want, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("shape", [{}, {"depth": 2, "depth_single_blocks": 0}, {"depth": 0, "depth_single_blocks": 3}])
def test_analytic_flops_match_flop_counter(shape):
    cfg = flux.Config.model_validate({**TINY, **shape})
    model = flux.build(cfg, META)
    _randomize(model)
    ids, tid = flux.image_ids(3, 8, 8, 2), torch.zeros(3, 1, 3)

    def loss(m, b):
        img, txt, t, y = b
        return m(img, ids, txt, tid, t, y).pow(2).mean()

    img, _, txt, _, t, y = _inputs(cfg)
    counted = flops.count_train_flops(loss, model, (img, txt, t, y))
    analytic = 3 * flux.flops_per_sample(cfg, META)
    assert flops.relative_error(analytic, counted) <= 0.02, (analytic, counted)
    by_class = flux.flops_by_class(cfg, META)
    assert by_class["attention"] > 0 and sum(by_class.values()) == pytest.approx(flux.flops_per_sample(cfg, META))


def test_pack_round_trip_and_positions():
    x = torch.randn(2, 3, 6, 4)
    tokens = flux.pack(x, 2)
    assert tokens.shape == (2, 6, 12)
    assert torch.equal(flux.unpack(tokens, 6, 4, 2), x)
    assert torch.equal(tokens[0, 1], x[0, :, 0:2, 2:4].flatten())  # patch (row 0, column 1), channels first
    ids = flux.image_ids(1, 6, 4, 2)
    assert ids[0, 1].tolist() == [0, 0, 1] and ids[0, 2].tolist() == [0, 1, 0]


def test_mlperf_preset_has_the_reference_shape():
    cfg = flux.Config.model_validate({"preset": "flux-schnell", "conditioning": "text"})
    meta = {"latent_shape": (16, 32, 32), "conditioning": {"text": {"context_dim": 4096, "vec_dim": 768,
                                                                       "tokens": 256}}}
    assert (cfg.depth, cfg.depth_single_blocks, cfg.hidden_size, cfg.num_heads) == (19, 38, 3072, 24)
    with torch.device("meta"):
        n = sum(p.numel() for p in flux.build(cfg, meta).parameters())
    assert 11.8e9 < n < 12.0e9, n  # "~11.9B" (MLPerf text_to_image/README.md)
    assert flux.dims(cfg, meta) == {"in": 64, "img": 256, "txt": 256, "ctx": 4096, "vec": 768}


def test_bad_shapes_are_refused_naming_the_field():
    with pytest.raises(ValidationError, match="num_heads"):
        flux.Config.model_validate({**TINY, "num_heads": 5})
    with pytest.raises(ValidationError, match="axes_dim"):
        flux.Config.model_validate({**TINY, "axes_dim": [4, 4, 4]})
    with pytest.raises(ValidationError, match="timestep_sampling"):
        flux.Config.model_validate({**TINY, "timestep_sampling": "cosine"})
