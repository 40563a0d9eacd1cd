"""The pydantic `Config` of the HSTU encoder (with its presets), apart from the model: what spec validation reads
without importing torch (suite/registry.py MODEL_CONFIGS). suite/models/recsys/hstu.py builds from this very class.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

from suite.models.common.configs import under_preset

# dense parameters (beside the tables; docs/recommenders.md): full 18.9 M on Yambda's meta (history 4087, 8
# contextual tokens, 2 side tables; 5.2 M the positional encoder), cpu 779 k (655 k the positional encoder) and tiny
# 3.5 k on MovieLens (history 32)
PRESETS: dict[str, dict[str, Any]] = {
    "tiny": {"embedding_dim": 8, "d_model": 8, "num_heads": 1, "linear_dim": 8, "qk_dim": 8, "num_layers": 1,
             "preprocessor_hidden": 16, "mlp_hidden": 16, "input_dropout": 0.0, "linear_dropout": 0.0,
             "num_position_buckets": 64, "num_time_buckets": 64},
    "cpu": {"embedding_dim": 64, "d_model": 64, "num_heads": 2, "linear_dim": 32, "qk_dim": 32, "num_layers": 2,
            "preprocessor_hidden": 128, "mlp_hidden": 128, "input_dropout": 0.2, "linear_dropout": 0.1,
            "num_position_buckets": 8192, "num_time_buckets": 2048},
    # configs.py get_hstu_configs: hstu_num_heads=4, hstu_attn_linear_dim=128, hstu_attn_qk_dim=128,
    # hstu_attn_num_layers=5, hstu_embedding_table_dim=512 (HSTU_EMBEDDING_DIM), hstu_preprocessor_hidden_dim=256,
    # hstu_transducer_embedding_dim=512, hstu_input_dropout_ratio=0.2, hstu_linear_dropout_rate=0.1; dlrm_hstu.py:
    # out_features=512 in both the item MLP and the multitask prediction module (mlp_hidden)
    "full": {"embedding_dim": 512, "d_model": 512, "num_heads": 4, "linear_dim": 128, "qk_dim": 128, "num_layers": 5,
             "preprocessor_hidden": 256, "mlp_hidden": 512, "input_dropout": 0.2, "linear_dropout": 0.1,
             "num_position_buckets": 8192, "num_time_buckets": 2048},
}
# dlrm_hstu.py builds HSTUPositionalEncoder(num_position_buckets=8192, num_time_buckets=2048) for every data set
# (`cpu` keeps them, so its init scale is the reference's; `tiny` is ours)


class Config(BaseModel):
    model_config = ConfigDict(extra="forbid")
    preset: Literal["tiny", "cpu", "full"] | None = Field(default=None, description="sizes; a field set wins")
    embedding_dim: int = Field(gt=0)
    d_model: int = Field(gt=0, description="the transducer's width (hstu_transducer_embedding_dim)")
    num_heads: int = Field(gt=0)
    linear_dim: int = Field(gt=0, description="per-head width of U and V (hstu_attn_linear_dim)")
    qk_dim: int = Field(gt=0, description="per-head width of Q and K (hstu_attn_qk_dim)")
    num_layers: int = Field(gt=0)
    preprocessor_hidden: int = Field(gt=0)
    mlp_hidden: int = Field(gt=0, description="hidden width of the item MLP and the prediction module (512 in "
                                              "dlrm_hstu.py)")
    input_dropout: float = Field(default=0.0, ge=0, lt=1)
    linear_dropout: float = Field(default=0.0, ge=0, lt=1)
    num_position_buckets: int = Field(gt=0, description="rows of the positional encoder's position table (8192 in "
                                                        "dlrm_hstu.py)")
    num_time_buckets: int = Field(gt=0, description="time buckets of the positional encoder (2048 in dlrm_hstu.py; "
                                                    "its table has one row more)")

    @model_validator(mode="before")
    @classmethod
    def _preset(cls, data: Any) -> Any:
        return under_preset(data, PRESETS)
