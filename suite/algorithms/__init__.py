"""Algorithms under test: optimizers, schedules, losses, precision recipes, compression; built-in or plugged in.

Owns the plug-in points a spec names (`optimizer`, `schedule`, `loss`, `compression`, `precision`), their
load-time checks (`plugins`), provenance of what ran, and the named bundles `--algo` picks.

May import: `suite.spec`, `suite.specload`, `suite.registry`. Never: `suite.backends`, `suite.execution`,
`suite.results`.
"""
