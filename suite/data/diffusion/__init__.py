"""Diffusion data: MLPerf flux1's preprocessed latents (Arrow). May import what `suite.data` may.
"""
