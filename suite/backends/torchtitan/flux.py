"""The suite's `flux` model config as torchtitan 0.3.0's own FluxModel (torchtitan.models.flux, the model the MLPerf
flux1 reference trains), built from torchtitan's config helpers (`_flux_debug` narrowed with
`_make_double_block_config`, `_make_single_block_config`, `EmbedND`, `MLPEmbedder`, `LastLayer`), as
tests/models/test_flux.py builds it for the forward parity. The suite model keeps torchtitan's parameter names, so
its initial weights load into torchtitan's model unchanged (`load_state_dict(strict=True)`). Parallelised by
torchtitan's `parallelize_flux` (its full activation checkpointing per block, per-block compile, FSDP2 with
gradient division disabled). Imports torchtitan: only the torchtitan backend calls this.
"""

from __future__ import annotations

import dataclasses
from copy import deepcopy
from typing import Any

from torch import nn

from suite.models.flux import model as flux
from suite.models.flux.model import TIME_DIM


def titan_config(cfg: flux.Config, meta: dict[str, Any]) -> Any:
    """torchtitan's FluxModel.Config of the suite's `cfg` on the data's shapes (`meta`: latent shape, conditioning).
    Patchify stays outside the model in both (torchtitan's trainer packs latents before the call)."""
    import torchtitan.models.flux as tf
    from torchtitan.models.common.linear import Linear

    d = flux.dims(cfg, meta)
    h, inc, ctx, vec, axes = cfg.hidden_size, d["in"], d["ctx"], d["vec"], tuple(cfg.axes_dim)

    def lin(i: int, o: int, init: dict) -> Any:
        return Linear.Config(in_features=i, out_features=o, bias=True, param_init=init)

    double = tf._make_double_block_config(hidden_size=h, num_heads=cfg.num_heads, mlp_ratio=cfg.mlp_ratio,
                                          qkv_bias=cfg.qkv_bias)
    single = tf._make_single_block_config(hidden_size=h, num_heads=cfg.num_heads, mlp_ratio=cfg.mlp_ratio)
    return dataclasses.replace(
        tf._flux_debug(), in_channels=inc, out_channels=inc, vec_in_dim=vec, context_in_dim=ctx, hidden_size=h,
        mlp_ratio=cfg.mlp_ratio, num_heads=cfg.num_heads, depth=cfg.depth, depth_single_blocks=cfg.depth_single_blocks,
        axes_dim=axes, theta=cfg.theta, img_in=lin(inc, h, tf._XAVIER_LINEAR), txt_in=lin(ctx, h, tf._XAVIER_LINEAR),
        pe_config=tf.EmbedND.Config(dim=cfg.head_dim, theta=cfg.theta, axes_dim=axes),
        time_in_config=tf.MLPEmbedder.Config(in_dim=TIME_DIM, hidden_dim=h, in_layer=lin(TIME_DIM, h, tf._NORMAL_02),
                                             out_layer=lin(h, h, tf._NORMAL_02)),
        vector_in_config=tf.MLPEmbedder.Config(in_dim=vec, hidden_dim=h, in_layer=lin(vec, h, tf._NORMAL_02),
                                               out_layer=lin(h, h, tf._NORMAL_02)),
        double_blocks=[deepcopy(double) for _ in range(cfg.depth)],
        single_blocks=[deepcopy(single) for _ in range(cfg.depth_single_blocks)],
        final_layer_config=tf.LastLayer.Config(hidden_size=h, patch_size=1, out_channels=inc,
                                               linear=lin(h, inc, tf._ZERO_LINEAR),
                                               adaln_linear=lin(h, 2 * h, tf._ZERO_LINEAR)))


def build(cfg: flux.Config, meta: dict[str, Any], suite_model: nn.Module, device: Any = "cpu") -> nn.Module:
    """torchtitan's FluxModel with the suite model's weights (every tensor must land: strict)."""
    model = titan_config(cfg, meta).build()
    model.load_state_dict(suite_model.state_dict(), strict=True)
    return model.to(device)
