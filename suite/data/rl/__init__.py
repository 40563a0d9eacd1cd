"""Reinforcement-learning data and environments: gymnasium experience, arithmetic problems, GSM8K, generated
bug-fix repositories, R2E-Gym task rows. May import what `suite.data` may.
"""
