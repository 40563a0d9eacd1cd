"""The Python behind the specs: one module per task (image classification, language modelling, ...).

`contract` is the Workload protocol a backend and the harness rely on (`Workload`, `Batch`, `Context`); `base`
is the plumbing most tasks share (`WorkloadBase`: the spec's model and data components resolved through the
registry).

May import: `suite.registry`, `suite.spec`, `suite.models`, `suite.data`, `suite.algorithms`, `suite.measure` (the
metrics a task reports: AUC, NDCG). Never: `suite.backends`, `suite.execution`, `suite.results`.
"""
