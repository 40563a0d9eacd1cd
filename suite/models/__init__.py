"""Model builders shared by workloads; each module exposes COMPONENT with a pydantic Config and build().

Each builder also gives its analytic FLOPs (`flops_per_sample`, and by op class where it can), which MFU divides
by. May import: `suite.measure.flops`; never workloads, backends or execution.
"""
