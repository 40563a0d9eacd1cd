"""What a run measures and where it happened: FLOPs, peaks, MFU, step times, memory, energy, MLLOG, profiles.

`instruments` is the one object the harness calls at fixed points; `flops`, `peaks`, `op_dtypes`, `metrics`,
`memory` (GPT) and `llm_memory` (Llama/MoE), `energy`, `mllog` (with `mlperf_keys`, MLPerf's names) and
`profiling` each own one measurement; `environment` and `fingerprint` record the
host and accelerator a run used.

May import: `suite.results` (the record's types, its atomic writer), `suite.models` (the memory estimators),
`suite.devices`, `suite.spec`. Never: `suite.backends`, `suite.execution`, `suite.compare`, `suite.studies`,
`suite.site`.
"""
