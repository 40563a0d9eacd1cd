"""The timed loop's contract, below every loop that drives a run: the stop codes (`contract`), the live progress line
(`Progress`), the `Sink` a driver writes its step and evaluation figures into, and the one implementation of that sink's
figures (`figures.Figures`: the clock, the counts, the evaluation curve, and the ONE place time to target is set).

The harness's own loop (suite/harness.py), the throughput loop (suite/throughput.py) and a backend that is a whole
trainer (suite/backends/verl/launch.py) all write through it.

May import: `suite.spec`, `suite.results.record` (`EvalPoint`), `suite.measure` (the instruments the clock calls, MLPerf's
clock record), `suite.devices`, `suite.distributed`. Never: `suite.backends`, `suite.harness`, `suite.execution`,
`suite.cli`.
"""
