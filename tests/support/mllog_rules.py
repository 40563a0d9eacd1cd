"""Which keys the official MLPerf compliance checker reports as failed, read from its messages (its CHECK lines, its
per-key summaries, and a required key the log lacks); and one run of its closed-division rules file on a log."""

from __future__ import annotations

import re
from pathlib import Path


def failed_rules(messages: list[str]) -> set[str]:
    keys = set()
    for m in messages:
        keys.update(re.findall(r"CHECK for '(\w+)' failed", m))
        keys.update(re.findall(r"Failed checks for (\w+)", m))
        keys.update(re.findall(r"Required (?:EXACTLY_ONE|AT_LEAST_ONE) occurrence\(s\) of '(\w+)'", m))
    return keys


def closed_rules_check(rules: str, mllog: Path, ruleset: str = "6.1.0") -> tuple[set[str], list[str]]:
    """mlperf_logging's checker with one benchmark's rules file (e.g. `closed_qwen35_397b_grpo.yaml` of 6.1.0) on a
    log: (names whose CHECK failed, other messages: parse errors and missing keys; eval_accuracy's own summary
    line is left out, as its CHECK is in the first set)."""
    from mlperf_logging.compliance_checker import mlp_compliance, mlp_parser

    checker = mlp_compliance.make_checker("training", ruleset, quiet=True, werror=False)
    lines, errors = mlp_parser.parse_file(str(mllog), ruleset=ruleset)
    try:
        checker.configured_checks(lines, str(Path(mlp_compliance.__file__).parent / f"training_{ruleset}" / rules))
    finally:
        mlp_compliance.enqueued_configs.clear()
    messages = [str(m) for m in (*checker.not_overwritable, *checker.overwritable.values())]
    failed = {m.group(1) for t in messages if (m := re.search(r"CHECK for '(\w+)' failed", t))}
    other = [str(e) for e in errors or []]
    other += [t for t in messages if "CHECK for" not in t and "Failed checks for eval_accuracy" not in t]
    return failed, other
