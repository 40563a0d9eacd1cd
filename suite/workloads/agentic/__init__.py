"""Agentic RL: multi-turn, tool-using rollouts for GRPO (MLPerf Training 6.1's qwen35_397b_grpo in kind).

`env` is the environment contract (observation -> action -> tool -> observation ... -> reward) and the batched
multi-turn rollout that records each trajectory and masks tool outputs out of the loss; `sandbox` runs a tool's
command in a throw-away copy of a repository under OS limits; `bugfix` is the CPU tier's environment (generated
repositories with a one-line bug and a failing test); `async_grpo` overlaps generation with training at a declared
staleness. May import what suite.workloads may import.
"""
