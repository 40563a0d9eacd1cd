"""Studies: workloads x algorithms x seeds, scored as AlgoPerf does.

The runner (`runner`, `trainbench study`), the typed report and its reader (`report`), and performance profiles
with the integrated score (`profiles`). May import: `suite.results`, `suite.execution`, `suite.registry`,
`suite.specload`, `suite.algorithms`, `suite.site.charts` (the profile plot); never cli.
"""
