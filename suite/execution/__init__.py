"""Where and how runs execute: planning, the one launcher seam, isolated children, watchdogs, progress.

`plan` turns names, tiers and flags into checked RunRequests; `launch` is the seam (Launcher, Outcome, Options,
Control) that `pool` (inline and local), `ray`, `slurm` and `inprocess` implement; `isolated` and `child` are the two
sides of one run's process, `watchdog` ends a stalled run, `processes` and `forkserver` manage processes.
May import: `suite.harness`, `suite.loop`, `suite.backends`, `suite.results`, `suite.measure`, `suite.algorithms`,
`suite.data.base` (`DataMissing`), `suite.registry`, `suite.spec`, `suite.specload`, `suite.devices`,
`suite.distributed`. Never: `suite.compare`, `suite.site`, `suite.cli`.
"""
