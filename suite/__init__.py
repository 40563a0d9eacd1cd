"""TrainBench: a benchmark suite, leaderboard and CI harness for deep-learning training performance."""

__version__ = "0.1.0"
