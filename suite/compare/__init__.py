"""Compare: the PR gate and the nightly's verdicts.

Time-to-accuracy verdicts of a candidate against a baseline (`tta`; its data in `model`, its JSON and Markdown in
`output`, the comparison key in `key`), throughput A/B on one runner (`ab` runs both commits alternating,
`ab_verdict` decides), per-runner noise floors (`noise_floor`) and change points over the history (`history`).
May import: `suite.results` and `suite.spec`; never site, studies or cli.
"""
