"""The pydantic `Config` of data set reader gsm8k.py, apart from the reader: what spec validation reads without
importing numpy or torch (suite/registry.py DATASET_CONFIGS). suite/data/rl/gsm8k.py loads with this very class.
"""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field


class Config(BaseModel):
    model_config = ConfigDict(extra="forbid")
    path: str | None = Field(default=None, description="folder with train/test .parquet (veRL) or .jsonl (original); "
                             "relative paths are under TRAINBENCH_DATA (default: TRAINBENCH_DATA/gsm8k)")
    tokenizer: str | None = Field(default=None, description="the policy's model folder (tokenizer.json, tokenizer_config.json, "
                           "generation_config.json); relative paths are under TRAINBENCH_DATA")
    chat_template: bool = Field(default=True, description="render the prompt with tokenizer_config.json's template")
    max_prompt_length: int = Field(default=512, gt=0, description="longer prompts are dropped (veRL's "
                                   "data.max_prompt_length with filter_overlong_prompts)")
    max_train_problems: int | None = Field(default=None, gt=0)
    eval_problems: int | None = Field(default=None, gt=0, description="the first N test problems (default: all)")
