"""`trainbench ab` says what it is doing while a round runs (issue 49: about two silent minutes a round): each round
announces its start, then says it is still running every HEARTBEAT_S, then its end. The rounds' real machinery
(worktrees, venvs, lockstep runs) is tested in test_ab.py; here its blocks are stand-ins that take a while."""

from __future__ import annotations

import time
from pathlib import Path

from suite.compare import ab, ab_plan


def test_each_round_announces_itself_and_beats_while_it_runs(tmp_path: Path, monkeypatch) -> None:
    sides = [ab_plan.Side(name, name, name * 10, tmp_path, Path("python")) for name in ab_plan.SIDES]
    monkeypatch.setattr(ab, "prepare", lambda plan, base, head, log: sides)
    monkeypatch.setattr(ab, "HEARTBEAT_S", 0.05)

    def slow_round(first, second, plan, round_, log=None):
        time.sleep(0.3)
        return [ab_plan.Block(round_, first.name, 0.3, 0), ab_plan.Block(round_, second.name, 0.3, 0)]

    monkeypatch.setattr(ab, "run_lockstep", slow_round)
    lines: list[str] = []
    plan = ab_plan.ABPlan(repo=tmp_path, out=tmp_path / "out", workloads=["cv/digits_cnn"], rounds=2)
    ab.run_ab(plan, "main", "main", log=lines.append)
    first = [line for line in lines if line.startswith("round 1/2")]
    assert first[0] == "round 1/2 base+head in lockstep: started"
    assert any("still running" in line for line in first[1:-1]), first
    assert "exit" in first[-1] and not any("still running" in line for line in lines[lines.index(first[-1]):]
                                           if line.startswith("round 1/2"))
    assert lines.index(first[-1]) < lines.index("round 2/2 head+base in lockstep: started")
