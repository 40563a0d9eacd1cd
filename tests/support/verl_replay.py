"""Stands in for `python -m verl.trainer.main_ppo` where no GPU can run it: takes the same command line, checks that
what it names exists (the model folder with its tokenizer, the parquet files), then, like veRL's trainer, opens the
metrics log at VERL_FILE_LOGGER_PATH when its loop starts and appends lines to it: the lines of a log that veRL's
own FileLogger wrote (TRAINBENCH_REPLAY), one every TRAINBENCH_REPLAY_DELAYS seconds (comma-separated, the last
repeats), then exits with TRAINBENCH_REPLAY_EXIT."""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path


def main(argv: list[str]) -> int:
    args = dict(a.split("=", 1) for a in argv)
    model = Path(args["actor_rollout_ref.model.path"])
    needed = [model / "config.json", model / "model.safetensors", model / "tokenizer.json",
              model / "generation_config.json", Path(args["data.train_files"]), Path(args["data.val_files"])]
    if missing := [str(p) for p in needed if not p.is_file()]:
        print(f"verl_replay: missing {missing}", flush=True)
        return 3
    delays = [float(d) for d in os.environ.get("TRAINBENCH_REPLAY_DELAYS", "0.05").split(",")]
    lines = Path(os.environ["TRAINBENCH_REPLAY"]).read_bytes().splitlines(keepends=True)
    time.sleep(0.2)  # the start-up
    with open(os.environ["VERL_FILE_LOGGER_PATH"], "wb", buffering=0) as out:
        for i, line in enumerate(lines):
            time.sleep(delays[min(i, len(delays) - 1)])
            out.write(line)
    print("verl_replay: done", flush=True)
    return int(os.environ.get("TRAINBENCH_REPLAY_EXIT", "0"))


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
