"""The pydantic `Config` of data set reader criteo.py, apart from the reader: what spec validation reads without
importing numpy or torch (suite/registry.py DATASET_CONFIGS). suite/data/rec/criteo.py loads with this very class.
"""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field

N_DENSE, N_SPARSE = 13, 26

# MLPerf dlrm_dcnv2 (the reference README's materialize step; mlcommons/ck get-preprocessed-dataset-criteo)
NUM_EMBEDDINGS = (40000000, 39060, 17295, 7424, 20265, 3, 7122, 1543, 63, 40000000, 3067956, 405282, 10, 2209, 11938,
                  155, 4, 976, 14, 40000000, 40000000, 40000000, 590152, 12973, 108, 36)
MULTI_HOT_SIZES = (3, 2, 1, 2, 6, 1, 1, 1, 1, 7, 3, 8, 1, 6, 9, 5, 1, 1, 1, 12, 100, 27, 10, 3, 1, 1)


class Config(BaseModel):
    model_config = ConfigDict(extra="forbid")
    path: str | None = Field(default=None, description="folder holding day_{d}_dense.npy, _labels.npy, "
                                                        "_sparse_multi_hot.npz")
    train_days: list[int] = Field(default=list(range(23)), min_length=1, description="days trained, in this order")
    eval_day: int = Field(default=23, description="its first half is the validation set")
    num_embeddings_per_feature: list[int] = Field(default=list(NUM_EMBEDDINGS), min_length=N_SPARSE,
                                                  max_length=N_SPARSE)
    multi_hot_sizes: list[int] = Field(default=list(MULTI_HOT_SIZES), min_length=N_SPARSE, max_length=N_SPARSE)
    limit: int | None = Field(default=None, gt=0, description="keep only the first N samples of each day (tiny)")
