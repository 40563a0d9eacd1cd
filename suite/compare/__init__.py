"""Compare: the PR gate and the nightly's verdicts.

Time-to-accuracy verdicts of a candidate against a baseline (`tta`; its data in `model`, its JSON and Markdown in
`output`), throughput A/B on one runner (`ab` runs both commits alternating, `ab_verdict` decides) and change
points over the history (`history`). The comparison key and the noise floors are stored with the baselines, so
they live in `suite.results` (`key`, `noise_floor`).

May import: `suite.results`, `suite.throughput` (the A/B runner's lockstep turns), `suite.execution.processes`
(the A/B runner ends its children's process trees), `suite.run_flags` (each A/B block's `trainbench run`). Never: `suite.site`, `suite.studies`, `suite.cli`.
"""
