"""The processed-Yambda reader (MLPerf dlrmv4's layout) on files generated in that layout: anchors are the LISTEN
events, labelled by the listen-plus bit, with the user's strictly earlier events as history (the reference's action
bits); the test window is strictly later than every training event; a malformed or mismatched file is refused
naming the file and the field, and `trainbench run` exits 2 before anything is recorded."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from suite import harness, registry
from suite.data.base import DataMissing
from suite.data.rec import yambda, yambda_fixture
from suite.specload import load_spec

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def files(tmp_path_factory) -> Path:
    return yambda_fixture.write(tmp_path_factory.mktemp("yambda"))


def _load(folder: Path, **kw) -> yambda.YambdaAnchors:
    return yambda.load(yambda.Config(path=str(folder), **kw))


def test_anchors_labels_and_histories_follow_the_files(files: Path) -> None:
    data = _load(files, max_history=6)
    sessions = pq.read_table(files / "train_sessions.parquet").to_pydict()
    listens = sum(t == 0 for ts in sessions["event_types"] for t in ts)
    train_idx, eval_idx = data.split()
    # no floor (min_history 0): every LISTEN of train_sessions anchors, the last window evaluated, none dropped
    assert len(train_idx) + len(eval_idx) == listens and data.meta["eval_window"] == data.meta["windows"] - 1
    # one user's events by hand: its first listen of the evaluated window, the label and the 6 events before it
    u = 3
    events = [(t, i, e, p) for s_uid, its, tss, ets, ps in zip(sessions["uid"], sessions["item_ids"],
                                                                  sessions["timestamps"], sessions["event_types"],
                                                                  sessions["played_ratio_pct"], strict=True)
              if s_uid == u for i, t, e, p in zip(its, tss, ets, ps, strict=True)]
    lo = data.meta["first_anchor_ts"] + data.meta["eval_window"] * 86400
    k = next(j for j in range(len(events)) if events[j][2] == 0 and events[j][0] >= lo)
    t, item, _, played = events[k]
    anchor = next(a for a in eval_idx if data.item[a] == item + 1 and data.timestamp[a] == t)
    assert data.label[anchor] == float(played >= 50)
    expect_items = [e[1] + 1 for e in events[k - 6 : k]]
    expect_bits = [1 if e[2] == 0 and e[3] >= 50 else 2 if e[2] == 1 else 4 for e in events[k - 6 : k]]
    assert data.hist_item[np.array([anchor])][0].tolist() == expect_items
    assert data.hist_rating[np.array([anchor])][0].tolist() == expect_bits
    # a user's first listen has an empty (all padding) history; windows are days, the evaluated one is last
    assert (data.hist_item[train_idx[:1]] == 0).all()
    assert data.window[train_idx].max() < data.window[eval_idx].min()
    assert 0.3 < data.label.mean() < 0.7 and data.cardinality["rating"] == yambda.ACTION_ROWS
    # test_events.parquet is validated and unused: no anchor is one of its events
    assert data.meta["test_events_unused"] == 320 and int(data.timestamp.max()) < json.loads(
        (files / "split_meta.json").read_text())["split_timestamp"]


def _copy(files: Path, dest: Path) -> Path:
    dest.mkdir()
    for f in files.iterdir():
        (dest / f.name).write_bytes(f.read_bytes())
    return dest


def _meta(folder: Path, **change) -> None:
    meta = json.loads((folder / "split_meta.json").read_text())
    (folder / "split_meta.json").write_text(json.dumps(meta | change))


def _rewrite(path: Path, fn) -> None:
    table = pq.read_table(path)
    pq.write_table(fn(table), path)


def _case(name: str, folder: Path) -> str:
    if name == "missing_column":
        _rewrite(folder / "train_sessions.parquet", lambda t: t.drop_columns(["played_ratio_pct"]))
        return "train_sessions.parquet: no column 'played_ratio_pct'"
    if name == "ragged_session":
        def cut(t):
            col = t.column("timestamps").to_pylist()
            col[2] = col[2][:-1]
            return t.set_column(t.schema.get_field_index("timestamps"), "timestamps", pa.array(col))
        _rewrite(folder / "train_sessions.parquet", cut)
        return "train_sessions.parquet: session row 2: column 'timestamps' holds 11 events"
    if name == "count_mismatch":
        _meta(folder, n_test_events=5)
        return "test_events.parquet: 320 events, but"
    if name == "index_mismatch":
        _rewrite(folder / "session_index.parquet", lambda t: t.set_column(
            2, "n_events", pa.array([13] + t.column("n_events").to_pylist()[1:], pa.int64())))
        return "session_index.parquet: does not match train_sessions.parquet"
    if name == "item_out_of_range":
        np.save(folder / "item_popularity.npy", np.ones(40, np.int64))
        _meta(folder, n_items=40)
        return "item id"
    if name == "future_leak":
        _meta(folder, split_timestamp=int(json.loads((folder / "split_meta.json").read_text())["split_timestamp"])
              + 3600)
        return "is before"
    if name == "meta_field":
        _meta(folder, window_seconds="day")
        return "split_meta.json: field 'window_seconds' must be an integer"
    raise AssertionError(name)


CASES = ["missing_column", "ragged_session", "count_mismatch", "index_mismatch", "item_out_of_range",
         "future_leak", "meta_field"]


@pytest.mark.parametrize("case", CASES)
def test_a_malformed_or_mismatched_file_is_refused_naming_it(case: str, files: Path, tmp_path: Path) -> None:
    folder = _copy(files, tmp_path / case)
    expected = _case(case, folder)
    with pytest.raises(DataMissing) as err:
        _load(folder)
    assert expected in str(err.value), str(err.value)
    _load(files)  # the untouched files still load (the refusal is the change, not the reader)


def test_a_missing_file_is_named(files: Path, tmp_path: Path) -> None:
    folder = _copy(files, tmp_path / "partial")
    (folder / "session_index.parquet").unlink()
    with pytest.raises(DataMissing, match="session_index.parquet"):
        _load(folder)


def test_run_exits_2_before_start_naming_the_file(files: Path, tmp_path: Path) -> None:
    folder = _copy(files, tmp_path / "bad")
    expected = _case("count_mismatch", folder)
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]),
               OMP_NUM_THREADS="1", TRAINBENCH_DATA=str(tmp_path / "nodata"))
    r = subprocess.run([sys.executable, "-m", "suite.cli", "run", "rec/dlrmv4", "--variant", "tiny", "--set",
                        f"data.path={folder}", "--results", str(tmp_path / "res")],
                       capture_output=True, text=True, env=env, timeout=300)
    assert r.returncode == 2, r.stdout + r.stderr
    assert expected in r.stdout + r.stderr
    assert not (tmp_path / "res").exists() or not list((tmp_path / "res").rglob("*.json"))


def test_the_tiny_variant_learns_the_planted_listens(files: Path) -> None:
    """Labels, histories and the dense/sparse optimizer pair carry the signal: AUC on the future window well above
    chance after 100 steps (on the held-out day of version 7: 0.699 measured, 0.621 at step 50)."""
    spec = load_spec(registry.workload_files()["rec/dlrmv4"], {"data.path": str(files), "budget.max_steps": 100,
                                                               "eval.every_steps": 100, "eval.first_step": 100},
                     variant="tiny")
    result, _ = harness.run(harness.RunRequest(spec=spec, results_dir=None, threads=1))
    assert result.status in ("budget", "reached"), result.error
    assert result.eval_curve[-1].metrics["auc"] > 0.62


# ---- the reference's per-pool history gather ------------------------------------------------------------------
# mlcommons/training recommendation_v4/generative_recommenders/dlrm_v4 at a67b8459 (PR 889), datasets/yambda.py:
#   126-132  pools: listen-plus = listen and played_ratio >= 50, like = event_type 1, skip = listen and played < 50
#            (dislike / unlike / undislike are in no pool)
#   859-862  scan_start = max(user_start, flat_pos - scan_window); scan [scan_start, flat_pos), empty -> no history
#   909      per_pool = max(1, history_length // 3)
#   917-920  lp_idx = idx_all[is_lp][-per_pool:]; like_idx = ...; skip_idx = ... (each pool's last per_pool)
#   922-927  keep = concatenate([lp, like, skip]); keep = keep[argsort(keep, stable)] (merged in time order)
#   888-891  action_weight |= LP_BIT 1 / LIKE_BIT 2 / SKIP_BIT 4 by the event's pool
#   1004-1014 truncated to the last uih_seq_len_budget (max_seq_len - candidates - contextual) events
# train/gin/yambda_5b.gin 453 history_length 4086, 490 history_strategy "interleaved"; utils.py 1761 scan_window 20000.
LP, SKIP, LIKE, DISLIKE, UNLIKE, UNDISLIKE = (0, 80.0), (0, 20.0), (1, 0.0), (2, 0.0), (3, 0.0), (4, 0.0)
KINDS = [LP, SKIP, LIKE, DISLIKE, UNLIKE, UNDISLIKE]


def _reference_history(events: list[tuple[int, float]], pos: int, caps: tuple[int, int, int], scan_window: int,
                       budget: int, *, merge_by_pool: bool = False, scan: bool = True) -> list[int]:
    """The user-local indices of the history of the anchor at `pos`, as the reference's lines above pick them."""
    start = max(0, pos - scan_window) if scan else 0
    if pos <= start:
        return []
    idx = range(start, pos)
    lp = [j for j in idx if events[j][0] == 0 and events[j][1] >= 50]
    like = [j for j in idx if events[j][0] == 1]
    skip = [j for j in idx if events[j][0] == 0 and events[j][1] < 50]
    keep = lp[-caps[0]:] + like[-caps[1]:] + skip[-caps[2]:]
    if not merge_by_pool:
        keep = sorted(keep)
    return keep[-budget:]


def _bit(event: tuple[int, float]) -> int:
    return (1 if event[0] == 0 and event[1] >= 50 else 0) | (2 if event[0] == 1 else 0) | (4 if event[0] == 0 and
                                                                                          event[1] < 50 else 0)


@pytest.fixture(scope="module")
def pools(tmp_path_factory) -> tuple[Path, dict[int, list[tuple[int, float]]]]:
    from support import yambda_pools

    rng = np.random.default_rng(3)
    users = {0: [KINDS[k] for k in rng.choice(6, 70, p=[0.35, 0.25, 0.15, 0.1, 0.1, 0.05])],  # every pool and kind
             1: [[LP, SKIP, DISLIKE][k] for k in rng.choice(3, 40)],  # no like: that pool stays empty
             2: [DISLIKE, UNLIKE, UNDISLIKE, LP, LIKE, SKIP, LP],  # first listen: only non-pool events before it
             3: [LIKE, SKIP] + [DISLIKE] * 30 + [LP, LP],  # the like and skip fall out of the 25-event scan
             9: [LP]}  # a day later: the evaluated window (the last), every other anchor in the trained window 0
    return yambda_pools.write(tmp_path_factory.mktemp("pools"), users, offset_s={9: 86400}), users


def _ours(folder: Path, users: dict[int, list[tuple[int, float]]], **kw) -> dict[tuple[int, int], tuple]:
    """(uid, local index) of every anchor -> (history local indices, action bits, times) as the reader gives them."""
    data = _load(folder, **kw)
    where, item = {}, 0
    for uid, events in users.items():
        for j in range(len(events)):
            where[item] = (uid, j)
            item += 1
    out = {}
    for a in range(len(data)):
        if int(data.item[a]) - 1 not in where:
            continue
        hist = data.hist_item[np.array([a])][0]
        out[where[int(data.item[a]) - 1]] = ([where[int(i) - 1][1] for i in hist if i > 0],
                                             [int(b) for b, i in zip(data.hist_rating[np.array([a])][0], hist,
                                                                     strict=True) if i > 0],
                                             [int(t) for t, i in zip(data.hist_time[np.array([a])][0], hist,
                                                                     strict=True) if i > 0])
    return out


CASE = {"listen_plus_cap": 4, "like_cap": 2, "skip_cap": 3, "scan_window": 25}


@pytest.mark.parametrize("budget", [8, 40])  # 8: the merged pools (up to 9) cut to the budget; 40: never cut
def test_each_history_is_the_reference_per_pool_gather(pools, budget: int) -> None:
    folder, users = pools
    got = _ours(folder, users, max_history=budget, **CASE)
    caps = (CASE["listen_plus_cap"], CASE["like_cap"], CASE["skip_cap"])
    reached = {0: False, 1: False, 2: False}
    for (uid, j), (hist, bits, times) in got.items():
        events = users[uid]
        want = _reference_history(events, j, caps, CASE["scan_window"], budget)
        assert hist == want, (uid, j)
        assert bits == [_bit(events[k]) for k in want] and times == [1_700_000_000 + 60 * k for k in want]
        for p, bit in enumerate((1, 2, 4)):
            reached[p] |= sum(b == bit for b in bits) == caps[p]
        if uid == 1:
            assert 2 not in bits and sum(b == 1 for b in bits) <= caps[0]  # the empty pool's slots go to no other
    assert len(got) == sum(e == LP or e == SKIP for ev in users.values() for e in ev)
    assert got[(2, 3)] == ([], [], [])  # dislike / unlike / undislike are in no pool
    assert got[(3, 32)] == ([], [], []) and got[(3, 1)][0] == [0]  # beyond the scan window: not seen
    if budget == 40:
        assert all(reached.values()), reached  # each pool's cap reached by some anchor
    else:
        assert max(len(h) for h, _, _ in got.values()) == budget


@pytest.mark.parametrize("control", ["listen_plus_cap+1", "like_cap-1", "skip_cap+1", "merged by pool",
                                     "no scan window", "non-pool events kept"])
def test_a_wrong_rule_is_told_apart(pools, control: str) -> None:
    """Negative controls: the same comparison with the rule changed in one place fails for some anchor."""
    folder, users = pools
    got = _ours(folder, users, max_history=40, **CASE)
    caps = [CASE["listen_plus_cap"], CASE["like_cap"], CASE["skip_cap"]]
    kw: dict = {}
    if control.endswith(("+1", "-1")):
        name, step = control[:-2], int(control[-2:])
        caps[["listen_plus_cap", "like_cap", "skip_cap"].index(name)] += step
    elif control == "merged by pool":
        kw["merge_by_pool"] = True
    elif control == "no scan window":
        kw["scan"] = False
    wrong = {}
    for uid, j in got:
        events = users[uid]
        if control == "non-pool events kept":  # the old reader: the last events of every kind
            wrong[(uid, j)] = list(range(max(0, j - 40), j))
        else:
            wrong[(uid, j)] = _reference_history(events, j, tuple(caps), CASE["scan_window"], 40, **kw)
    assert any(got[k][0] != wrong[k] for k in got), control


def test_the_full_spec_caps_are_the_reference_values() -> None:
    spec = load_spec(registry.workload_files()["rec/dlrmv4"], {})
    data = spec.data.model_dump() if hasattr(spec.data, "model_dump") else dict(spec.data)
    history_length = 4086  # train/gin/yambda_5b.gin line 453
    per_pool = max(1, history_length // 3)  # datasets/yambda.py line 909
    assert (data["listen_plus_cap"], data["like_cap"], data["skip_cap"]) == (per_pool,) * 3 == (1362,) * 3
    assert data["scan_window"] == 20000  # utils.py line 1761
    assert 3 * per_pool <= data["max_history"] == 4096 - 1 - 8  # yambda.py 1004-1007: nothing truncated


@pytest.mark.parametrize("field", ["listen_plus_cap", "like_cap", "skip_cap", "scan_window", "max_history"])
@pytest.mark.parametrize("value", [0, -3, 2.5, "many", True])
def test_a_cap_that_is_not_a_positive_integer_is_refused_naming_it(field: str, value) -> None:
    from suite.specload import SpecError

    with pytest.raises(SpecError, match=rf"data\.{field}"):
        load_spec(registry.workload_files()["rec/dlrmv4"], {f"data.{field}": value}, variant="tiny")


# ---- the reference's evaluation set and anchor floor ----------------------------------------------------------
# mlcommons/training recommendation_v4/generative_recommenders/dlrm_v4 at a67b8459 (PR 889):
#   datasets/yambda.py 423      the flat store: train_sessions.parquet sorted by uid, session_id, exploded in order
#   datasets/yambda.py 370-372  anchor = (idx - user_start[uid] >= min_history) & (event_type == LISTEN)
#   datasets/yambda.py 626      t_min = the earliest anchor's timestamp
#   datasets/yambda.py 656-660  window_indices(ts): anchors with t_min + ts * W <= timestamp < t_min + (ts + 1) * W
#   datasets/yambda.py 737-762  eval_holdout_indices(start_ts): window_indices(start_ts), every user's when
#                               train_split_percentage >= 1.0
#   train/utils.py 2190-2194, 2886-2888  the evaluated set is eval_holdout_indices(eval_holdout_ts)
#   train/gin/yambda_5b.gin 226 TRAIN_SPLIT_PERCENTAGE 1.0, 502 min_history 4086, 529 window 86400 s,
#                               573 num_train_ts 299, 580 start_ts 0 (trained: windows 0-298), 790 eval_holdout_ts 299
# test_events.parquet: no line of the reference reads it.
STEP_S = 3 * 3600  # generated events three hours apart: eight a day


def _reference_sets(users: dict[int, list[tuple[int, float]]], offsets: dict[int, int], min_history: int,
                    holdout: int, *, t_min_of_events: bool = False, floor_on_listens: bool = False
                    ) -> tuple[set, set]:
    """(trained, evaluated) anchors as (uid, user-local index), by the reference's lines above."""
    from support.yambda_pools import T0

    def ts(uid: int, j: int) -> int:
        return T0 + offsets.get(uid, 0) + STEP_S * j

    anchors = []
    for uid in sorted(users):  # line 423
        events = users[uid]
        for j, (etype, _) in enumerate(events):
            prior = sum(e[0] == 0 for e in events[:j]) if floor_on_listens else j  # idx - user_start
            if etype == 0 and prior >= min_history:  # lines 370-372
                anchors.append((uid, j))
    t_min = min(ts(u, j) for u, j in anchors)  # line 626
    if t_min_of_events:
        t_min = min(ts(u, 0) for u in users)

    def window(w: int) -> set:  # lines 656-660
        return {(u, j) for u, j in anchors if t_min + w * 86400 <= ts(u, j) < t_min + (w + 1) * 86400}

    return set().union(*(window(w) for w in range(holdout))), window(holdout)  # utils.py 2886-2888, gin 573/580


@pytest.fixture(scope="module")
def days(tmp_path_factory) -> tuple[Path, dict[int, list[tuple[int, float]]], dict[int, int]]:
    from support import yambda_pools

    rng = np.random.default_rng(46)
    users = {u: [KINDS[k] for k in rng.choice(6, n, p=[0.35, 0.25, 0.15, 0.1, 0.1, 0.05])]
             for u, n in enumerate([44, 30, 52, 12, 38])}
    users[5] = [LP] * 40  # every event a listen: the floor's boundary (local index 9 no anchor, 10 the first)
    offsets = {0: 0, 1: 5 * 3600, 2: 20 * 3600, 3: 26 * 3600, 4: 43 * 3600, 5: 7 * 3600}
    return yambda_pools.write(tmp_path_factory.mktemp("days"), users, step_s=STEP_S, offset_s=offsets), users, offsets


FLOOR, HOLDOUT = 10, 3


def _sets(folder: Path, users: dict[int, list[tuple[int, float]]], **kw) -> tuple[set, set, yambda.YambdaAnchors]:
    data = _load(folder, max_history=8, **kw)
    where, item = {}, 0
    for uid, events in users.items():
        for j in range(len(events)):
            where[item] = (uid, j)
            item += 1
    train_idx, eval_idx = data.split()
    return ({where[int(data.item[a]) - 1] for a in train_idx}, {where[int(data.item[a]) - 1] for a in eval_idx},
            data)


def test_the_evaluated_set_and_the_floor_are_the_reference_rule(days) -> None:
    folder, users, offsets = days
    trained, evaluated, data = _sets(folder, users, min_history=FLOOR, eval_holdout_window=HOLDOUT)
    want_train, want_eval = _reference_sets(users, offsets, FLOOR, HOLDOUT)
    assert evaluated == want_eval and trained == want_train
    assert len(evaluated) > 10 and len(trained) > 10 and data.meta["windows"] > HOLDOUT + 1  # later anchors unused
    assert len(data) == len(trained) + len(evaluated)
    assert (5, FLOOR) in trained | evaluated and (5, FLOOR - 1) not in trained | evaluated  # the boundary
    assert all(j >= FLOOR for _, j in trained | evaluated)
    # MLLOG's eval_samples is this set's size (suite/workloads/recsys.py eval_samples: len(eval_idx))
    assert len(data.split()[1]) == len(want_eval)


@pytest.mark.parametrize("control", ["holdout+1", "holdout-1", "floor+1", "floor-1", "windows from the first event",
                                     "floor counted on listens"])
def test_a_wrong_evaluation_rule_is_told_apart(days, control: str) -> None:
    """Negative controls: the reference's rule changed in one place gives another evaluated or trained set."""
    folder, users, offsets = days
    trained, evaluated, _ = _sets(folder, users, min_history=FLOOR, eval_holdout_window=HOLDOUT)
    floor, holdout, kw = FLOOR, HOLDOUT, {}
    if control.endswith(("+1", "-1")):
        step = int(control[-2:])
        floor, holdout = (floor + step, holdout) if control.startswith("floor") else (floor, holdout + step)
    elif control == "windows from the first event":
        kw["t_min_of_events"] = True
    else:
        kw["floor_on_listens"] = True
    assert _reference_sets(users, offsets, floor, holdout, **kw) != (trained, evaluated), control


def test_bad_holdout_or_floor_is_refused_naming_the_field(days, tmp_path: Path) -> None:
    from support import yambda_pools

    folder, users, _ = days
    n = _load(folder, min_history=FLOOR).meta["windows"]
    for kw, text in (({"eval_holdout_window": n}, f"data.eval_holdout_window {n} is beyond the data"),
                     ({"eval_holdout_window": 0}, "data.eval_holdout_window 0 leaves no training window"),
                     ({"min_history": 60}, "data.min_history 60 earlier events")):
        with pytest.raises(DataMissing, match=re.escape(text)) as err:
            _load(folder, **{"min_history": FLOOR, **kw})
        assert "train_sessions.parquet" in str(err.value)
    gap = yambda_pools.write(tmp_path / "gap", {0: [LP] * 10, 1: [LP] * 10}, step_s=3600, offset_s={1: 3 * 86400})
    assert _load(gap, eval_holdout_window=3).meta["windows"] == 4  # the windows 1 and 2 hold nothing
    with pytest.raises(DataMissing, match=r"train_sessions.parquet: data.eval_holdout_window 2 holds no anchor"):
        _load(gap, eval_holdout_window=2)


def test_run_exits_2_before_start_on_a_holdout_beyond_the_data(files: Path, tmp_path: Path) -> None:
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]),
               OMP_NUM_THREADS="1", TRAINBENCH_DATA=str(tmp_path / "nodata"))
    r = subprocess.run([sys.executable, "-m", "suite.cli", "run", "rec/dlrmv4", "--variant", "tiny", "--set",
                        f"data.path={files}", "--set", "data.eval_holdout_window=5", "--results",
                        str(tmp_path / "res")], capture_output=True, text=True, env=env, timeout=300)
    assert r.returncode == 2, r.stdout + r.stderr
    assert "data.eval_holdout_window 5 is beyond the data" in r.stdout + r.stderr
    assert not (tmp_path / "res").exists() or not list((tmp_path / "res").rglob("*.json"))


def test_the_full_spec_evaluates_the_reference_holdout_day_after_its_floor() -> None:
    spec = load_spec(registry.workload_files()["rec/dlrmv4"], {})
    assert (spec.data.eval_holdout_window, spec.data.min_history) == (299, 4086)  # gin lines 790 and 502
    tiny = load_spec(registry.workload_files()["rec/dlrmv4"], {}, variant="tiny")
    assert (tiny.data.eval_holdout_window, tiny.data.min_history) == (4, 8)


@pytest.mark.parametrize("field", ["min_history", "eval_holdout_window"])
@pytest.mark.parametrize("value", [-1, 2.5, "many", True])
def test_a_holdout_or_floor_that_is_not_a_count_is_refused_naming_it(field: str, value) -> None:
    from suite.specload import SpecError

    with pytest.raises(SpecError, match=rf"data\.{field}"):
        load_spec(registry.workload_files()["rec/dlrmv4"], {f"data.{field}": value}, variant="tiny")
