"""Which keys the official MLPerf compliance checker reports as failed, read from its messages (its CHECK lines, its
per-key summaries, and a required key the log lacks)."""

from __future__ import annotations

import re


def failed_rules(messages: list[str]) -> set[str]:
    keys = set()
    for m in messages:
        keys.update(re.findall(r"CHECK for '(\w+)' failed", m))
        keys.update(re.findall(r"Failed checks for (\w+)", m))
        keys.update(re.findall(r"Required (?:EXACTLY_ONE|AT_LEAST_ONE) occurrence\(s\) of '(\w+)'", m))
    return keys
