"""MLPerf Training submissions: published logs read in and scored exactly as MLCommons does, packages written out.

`logs` reads one `result_N.txt` (mlperf_logging's own parser and compliance checker), `tree` walks a submitter
folder or a whole results repository, `score` is the result summarizer's olympic mean with RCP normalization,
`importer` turns logs into imported `Result`s (written through suite.results' append-only writer), and
`export` writes a submission-shaped folder from local runs. mlperf_logging is imported inside the functions that
need it (it pulls pandas and scipy).

May import: `suite.results`, `suite.spec`, `suite.registry`, `suite.specload`, `suite.measure.mllog` (the compliance
checker). Never: `suite.site`, `suite.cli`.
"""
