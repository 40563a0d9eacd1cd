"""MLPerf Training submissions: published logs read in and scored exactly as MLCommons does, packages written out.

`logs` reads one `result_N.txt` (mlperf_logging's own parser and compliance checker), `tree` walks a submitter
folder or a whole results repository, `score` is the result summarizer's olympic mean with RCP normalization,
`importer` turns logs into imported `Result`s (written through suite.results' append-only writer), and
`export` writes a submission-shaped folder from local runs. May import suite.results and suite.spec/registry;
mlperf_logging is imported inside the functions that need it (it pulls pandas and scipy).
"""
