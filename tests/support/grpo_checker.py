"""mlperf_logging's official checker with MLPerf Training 6.1's GRPO rules (closed_qwen35_397b_grpo.yaml) on a run's
MLLOG: which keys' CHECKs failed, and any other message (a key the rules name that the log lacks)."""

from __future__ import annotations

import re
from pathlib import Path


def grpo_rules_check(mllog: Path) -> tuple[set[str], list[str]]:
    """(names whose CHECK failed, other messages: parse errors and missing keys; eval_accuracy's own summary
    line is left out, as its CHECK is in the first set)."""
    from mlperf_logging.compliance_checker import mlp_compliance, mlp_parser

    checker = mlp_compliance.make_checker("training", "6.1.0", quiet=True, werror=False)
    lines, errors = mlp_parser.parse_file(str(mllog), ruleset="6.1.0")
    rules = Path(mlp_compliance.__file__).parent / "training_6.1.0" / "closed_qwen35_397b_grpo.yaml"
    try:
        checker.configured_checks(lines, str(rules))
    finally:
        mlp_compliance.enqueued_configs.clear()
    messages = [str(m) for m in (*checker.not_overwritable, *checker.overwritable.values())]
    failed = {m.group(1) for t in messages if (m := re.search(r"CHECK for '(\w+)' failed", t))}
    other = [str(e) for e in errors or []]
    other += [t for t in messages if "CHECK for" not in t and "Failed checks for eval_accuracy" not in t]
    return failed, other
