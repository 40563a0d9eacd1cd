"""`trainbench plan`: a spec's declared layout at full size, per rank, without the hardware.

`memory` lays the layout out per engine (pipeline stages, the engine's sharding of parameters, gradients and
optimizer state, activations in flight, collectives per step) and says the first thing that does not divide or
fit; `meta` builds the torch backend's FSDP2 layers on meta tensors under a fake process group of N ranks, the
parameter counts `memory` checks its own arithmetic against. May import: `suite.backends.layout` and
`suite.backends.translate` (pure), `suite.registry`, `suite.measure`, `suite.models`, `suite.spec`; never execution,
results or cli.
"""
