"""The static leaderboard site: results/ (through the index) -> HTML, built incrementally.

`build` is `trainbench site build/serve`; `data` the site's view of the results (leaderboards through
`results.stats`), `workloads` and `pages` the workload, month and run pages, `units` which months changed,
`reports` compare reports and studies, `render`, `tables` and `charts` the content, `output` the transaction on
the output folder.

May import: `suite.results`, `suite.compare` (reports), `suite.studies.report`, `suite.studies.profile_plot`.
Never: `suite.execution`, `suite.cli`.
"""
