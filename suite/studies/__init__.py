"""Studies: workloads x algorithms x seeds, scored as AlgoPerf does.

The runner (`runner`, `trainbench study`), the typed report and its reader (`report`), and performance profiles
with the integrated score (`profiles`) and their plot (`profile_plot`, which the site's study page draws too).

May import: `suite.results`, `suite.execution`, `suite.harness` (`RunRequest`), `suite.registry`, `suite.spec`,
`suite.specload`, `suite.algorithms`, `suite.data.base` (`DataMissing`). Never: `suite.site`, `suite.cli`.
"""
