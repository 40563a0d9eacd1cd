"""Results: what a run recorded and how it is read back, indexed, archived and blessed.

Owns the `Result` schema and its atomic append-only writer and migrations (`record`), the lean msgspec reader
(`lean`) and the run files compare and promote read (`runfiles`), the ONE walk of a results folder that every
reader uses (`tree`: no symlink followed out, only regular files), the one aggregation over seeds (`stats`),
baseline files and promote (`baseline_schema`, `baselines`) with what they store beside the figures (the
comparison key, `key`; A/A noise floors, `noise_floor`), the conditions a run was timed under read back
(`conditions`: a shared host, a pause), the wall-clock account's schema (`account`, Result.goodput), and the
embedded DuckDB index with its archives (`index/`).

May import: no other suite package (every other one reads results through here).
"""
