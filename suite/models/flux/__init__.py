"""The Flux diffusion transformer (`arch: flux`, `model`) and its tensor-parallel plan (`parallelize`). May
import what `suite.models` may.
"""
