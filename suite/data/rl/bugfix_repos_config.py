"""The pydantic `Config` of data set reader bugfix_repos.py, apart from the reader: what spec validation reads without
importing numpy or torch (suite/registry.py DATASET_CONFIGS). suite/data/rl/bugfix_repos.py loads with this very
class.
"""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field

NAMES = "abcdefgh"


class Config(BaseModel):
    model_config = ConfigDict(extra="forbid")
    lines: int = Field(default=3, ge=2, le=len(NAMES), description="assignments in m.py")
    eval_tasks: int = Field(default=32, gt=0, description="held-out tasks each evaluation runs")
    eval_seed: int = Field(default=20261207, description="draws the held-out tasks (fixed for every run)")
    max_turns: int = Field(default=5, gt=0, description="actions per episode before it is cut")
    pass_k: int = Field(default=2, gt=0, description="evaluation: attempts per held-out task (pass@k)")
    eval_temperature: float = Field(default=1.0, ge=0, description="sampling temperature of the k attempts")
    wall_s: float = Field(default=5.0, gt=0, description="sandbox: wall-clock limit of one tool command")
    cpu_s: int = Field(default=2, gt=0, description="sandbox: RLIMIT_CPU of one command")
    tool_workers: int = Field(default=2, gt=0, description="episodes whose tools run at once (threads)")
    lazy_demos: float = Field(default=0.0, ge=0, le=1, description="warm start: the fraction of the supervised "
                              "episodes whose demonstrator reads m.py and submits it unchanged (a habit the reward "
                              "must train out; 0: every episode is the expert's)")
