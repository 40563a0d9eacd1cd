"""Paths the tests share (importable from test modules and from conftest)."""

from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
DIGITS = ROOT / "workloads" / "cv" / "digits_cnn.yaml"
