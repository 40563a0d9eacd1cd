"""The static leaderboard site: results/ (through the index) -> HTML, built incrementally.

`build` is `trainbench site build/serve`; `data` the site's view of the results (leaderboards through
`results.stats`), `pages/` the pages, one folder each (its Python and its templates; `pages.PAGES` lists them),
`job` what every page renders through (the jinja environment, `Job`, `Site`), `months` which months changed,
`render`, `tables` and `charts` the content, `output` the transaction on the output folder; `templates/` and
`static/` the shared base template (with the page CSP), macros and assets.

May import: `suite.results`, `suite.compare` (reports), `suite.studies.report`, `suite.studies.profile_plot`.
Never: `suite.execution`, `suite.cli`.
"""
