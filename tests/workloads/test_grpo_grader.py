"""A GRPO evaluation grades completions by the reward its problems name (issue 43: data imports no algorithm, so
GSM8K's problems say `grader = "gsm8k"` and the workload looks the reward up), else by the problems' own `correct`,
else by equal text."""

from __future__ import annotations

from types import SimpleNamespace

from suite.data.rl.gsm8k import Problems
from suite.workloads.grpo import _grader


def test_gsm8k_problems_are_graded_by_verls_strict_rule() -> None:
    assert Problems.grader == "gsm8k"
    grade = _grader(SimpleNamespace(grader=Problems.grader))
    assert grade("so 3*4=12 and 12+30=42.\n#### 42", "42") is True
    assert grade("#### 41", "42") is False
    assert grade("the answer is 42", "42") is False  # strict: only '#### N' counts (veRL's default method)


def test_problems_without_a_grader_keep_their_own_rule() -> None:
    assert _grader(SimpleNamespace(correct=lambda text, answer: len(text) == int(answer)))("abc", "3") is True
    assert _grader(SimpleNamespace())("7", "7") is True
    assert _grader(SimpleNamespace())("7 ", "7") is False
