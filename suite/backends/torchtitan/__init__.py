"""The torchtitan backend (`backend.TorchtitanBackend`): the suite's `llama` configs built as torchtitan's models
(`model`: configs, SDPA swap, weight map) under its own parallelize functions. May import what `suite.backends` may.
"""
