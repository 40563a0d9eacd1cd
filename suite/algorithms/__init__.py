"""Algorithms under test: optimizers, schedules, losses, precision recipes, compression; built-in or plugged in."""
