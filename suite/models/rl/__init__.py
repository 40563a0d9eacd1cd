"""Reinforcement-learning policies: the PPO actor-critic MLP. May import what `suite.models` may.
"""
