"""Results: what a run recorded and how it is read back, indexed, archived and blessed.

Owns the `Result` schema and its atomic append-only writer and migrations (`record`), the lean msgspec reader
(`lean`) and the run files compare and promote read (`runfiles`), the one aggregation over seeds (`stats`),
baseline files and promote (`baseline_schema`, `baselines`), and the embedded DuckDB index with its archives
(`index/`). May import: `suite.spec`, `suite.registry`, `suite.measure`; never compare, studies, site or cli.
"""
