"""The score of the last `make mutation` run, per module: killed / (killed + survived + timeout + ...).

Reads mutmut's verdicts from mutants/<file>.meta for the mutant name patterns given (those scripts/mutation.sh
runs), prints one line per module and every surviving mutant's name (`mutmut show NAME` prints its diff).
"""

from __future__ import annotations

import datetime
import fnmatch
import json
import sys
from collections import Counter, defaultdict
from pathlib import Path

KILLED = {1: "killed", 3: "killed", 37: "killed"}  # 37: caught by the type check
STATUS = {0: "survived", None: "not checked", 5: "no tests", 33: "no tests", 34: "skipped", 36: "timeout",
          24: "timeout", -24: "timeout", 152: "timeout", 255: "timeout", -9: "segfault", -11: "segfault"}


def main(patterns: list[str]) -> int:
    by_module: dict[str, Counter[str]] = defaultdict(Counter)
    survivors: list[str] = []
    for meta in sorted(Path("mutants").rglob("*.py.meta")):
        module = str(meta.relative_to("mutants"))[: -len(".py.meta")].replace("/", ".")
        codes = json.loads(meta.read_text())["exit_code_by_key"]
        for name, code in codes.items():
            if patterns and not any(fnmatch.fnmatchcase(name, p) for p in patterns):
                continue
            status = KILLED.get(code) or STATUS.get(code, "suspicious")
            by_module[module][status] += 1
            if status not in ("killed", "not checked"):
                survivors.append(f"{name}: {status}")
    if not by_module:
        print("no mutation verdicts found under mutants/: run `make mutation` first")
        return 1
    print(f"mutation score per module ({datetime.date.today()}; killed / checked; a timeout is not counted as killed)")
    for module, c in sorted(by_module.items()):
        checked = sum(v for k, v in c.items() if k != "not checked")
        caught = c["killed"]
        score = f"{100 * caught / checked:5.1f}%" if checked else "    -"
        print(f"  {module:<28} {score}  killed {c['killed']:4d}  timeout {c['timeout']:3d}  survived "
              f"{c['survived']:3d}  no tests {c['no tests']:3d}  not checked {c['not checked']:3d}")
    if survivors:
        print("not killed (mutmut show NAME for the diff):")
        print("\n".join(f"  {s}" for s in survivors))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
