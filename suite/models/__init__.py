"""Model builders shared by workloads; each module exposes COMPONENT with a pydantic Config and build().

Each builder also gives its analytic FLOPs (`flops_per_sample`, and by op class where it can), which MFU divides
by. A checkpoint folder is data on disk: the Hugging Face readers raise `suite.data.base`'s `DataMissing` and
find their folders where `suite.data.locate` says; data never imports a model.

May import: `suite.measure.flops`, `suite.registry`, `suite.devices`, `suite.data.base`, `suite.data.locate`.
Never: `suite.workloads`, `suite.backends`, `suite.execution`.
"""
