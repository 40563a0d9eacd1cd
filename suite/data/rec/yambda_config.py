"""The pydantic `Config` of data set reader yambda.py, apart from the reader: what spec validation reads without
importing numpy or torch (suite/registry.py DATASET_CONFIGS). suite/data/rec/yambda.py loads with this very class.
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict, Field, field_validator


class Config(BaseModel):
    model_config = ConfigDict(extra="forbid")
    path: str | None = Field(default=None, description="folder holding the processed Yambda files")
    max_history: int = Field(default=4096, ge=1, description="history slots per sample (the reference's "
                             "uih_seq_len_budget): the merged pools' last max_history events are kept")
    listen_plus_cap: int = Field(default=1362, ge=1, description="most listen-plus events (listen, played >= 50%) "
                                 "in a history: the reference's per-pool cap, max(1, history_length // 3)")
    like_cap: int = Field(default=1362, ge=1, description="most like events in a history (the reference's "
                          "per-pool cap)")
    skip_cap: int = Field(default=1362, ge=1, description="most skip events (listen, played < 50%) in a history "
                          "(the reference's per-pool cap)")
    scan_window: int = Field(default=20000, ge=1, description="the pools are filled from the user's last "
                             "scan_window events (of any kind) before the anchor (the reference's scan_window)")
    min_history: int = Field(default=0, ge=0, description="a LISTEN is an anchor only once its user has this many "
                             "earlier events in train_sessions.parquet (the reference's min_history)")
    eval_holdout_window: int | None = Field(default=None, ge=0, description="the evaluated window (windows of "
                                            "split_meta.json's window_seconds counted from the first anchor; the "
                                            "reference's eval_holdout_ts): its anchors are evaluated, the windows "
                                            "before it trained; default: the last window")
    limit: int | None = Field(default=None, gt=0, description="keep only the first N training anchors in time")
    cross_rows: int | None = Field(default=None, gt=0, description="rows of every hashed cross table (the hash's "
                                   "modulus); default: the reference's per-table sizes (yambda_cross.CROSS_SPECS)")

    @field_validator("max_history", "listen_plus_cap", "like_cap", "skip_cap", "scan_window", mode="before")
    @classmethod
    def _whole(cls, v: Any, info: Any) -> Any:
        if isinstance(v, bool) or not isinstance(v, int) or v < 1:
            raise ValueError(f"data.{info.field_name} must be a positive integer, got {v!r}")
        return v

    @field_validator("min_history", "eval_holdout_window", mode="before")
    @classmethod
    def _count(cls, v: Any, info: Any) -> Any:
        if v is None and info.field_name == "eval_holdout_window":
            return v
        if isinstance(v, bool) or not isinstance(v, int) or v < 0:
            raise ValueError(f"data.{info.field_name} must be a non-negative integer, got {v!r}")
        return v
