"""Documented promises pinned by behaviour: each test here fails when its promise breaks (docs/testing.md lists
which deliberate breakage each one catches, and scripts/break_promises.py replays them).

No assertion here is a wall-clock band: a known delay is injected and the figures must contain it (a lower
bound the delay itself guarantees, whatever the load), or the test observes the order of calls.
"""

from __future__ import annotations

import os
import random
import re
from html.parser import HTMLParser
from pathlib import Path

import pytest
from support.site_factory import write_hostile, write_standard

from benchmarks.sim.results import make_result, noisy_runs, write_all
from suite import harness
from suite.compare import model as compare_model
from suite.compare import tta as cmp
from suite.execution.watchdog import Limits
from suite.results import record as results_mod
from suite.site.build import build_site
from suite.spec import Budget
from suite.specload import load_spec

ROOT = Path(__file__).resolve().parents[2]
DELAY_S = 1.5  # the injected delay: long beside a few digits steps (milliseconds each, tens under heavy load)


def _run(digits_path: Path, tmp_path: Path, task: str, monkeypatch, **overrides):
    monkeypatch.setenv("FAULT_SLEEP_S", str(DELAY_S))
    sets = {"task": task, "budget.max_steps": 10, "eval.every_steps": 5, "target.value": 1.01, **overrides}
    spec = load_spec(digits_path, sets)
    req = harness.RunRequest(spec=spec, results_dir=tmp_path, threads=1, overrides=sets, measure_peak=False)
    result, _ = harness.run(req)
    assert result.status == "budget", result.error
    return result


# ---- the clock (harness.py's first docstring line: MLPerf's rule) -------------------------------------------


def test_the_clock_starts_before_the_first_batch_is_touched(digits_path, tmp_path, monkeypatch):
    """A first batch that takes DELAY_S to fetch: that time is on the clock, in total_s, in the first
    evaluation's elapsed_s, and in the data wait."""
    r = _run(digits_path, tmp_path, "support.faults:SlowFirstBatch", monkeypatch)
    assert r.total_s >= DELAY_S
    assert r.eval_curve[0].step == 5 and r.eval_curve[0].elapsed_s >= DELAY_S
    assert r.eval_curve[0].train_s >= DELAY_S  # train-only time (AlgoPerf's view) holds it too: it is not eval
    assert r.throughput["data_wait_fraction"] * r.train_s >= DELAY_S * 0.999  # counted as waiting for data
    assert r.throughput["data_wait_fraction"] < 1.0  # a part of the train time: the steps computed too


def test_the_clock_never_pauses_for_evaluation(digits_path, tmp_path, monkeypatch):
    """Evaluation is on the clock: every evaluation point's elapsed time is its train time plus the eval time
    so far, and the run's total is train + eval."""
    r = _run(digits_path, tmp_path, "support.faults:SlowFirstBatch", monkeypatch, **{"eval.every_steps": 2})
    assert r.train_s + r.eval_s == pytest.approx(r.total_s, rel=1e-9)
    prev = 0.0
    for point in r.eval_curve:
        assert point.elapsed_s >= point.train_s and point.elapsed_s > prev
        prev = point.elapsed_s
    assert r.eval_curve[-1].elapsed_s - r.eval_curve[-1].train_s <= r.eval_s + 1e-9


# ---- steady-state throughput (and the MFU on it) leaves the warm-up step out --------------------------------


def test_steady_throughput_leaves_out_the_slow_first_step(digits_path, tmp_path, monkeypatch):
    """The first step sleeps DELAY_S. Steps 2..n together took at most total_s - DELAY_S, so a steady figure
    over them is at least (n-1) * batch / (total_s - DELAY_S); one that counted the first step would be at
    most n * batch / DELAY_S, which is far lower (the other steps take milliseconds)."""
    r = _run(digits_path, tmp_path, "support.faults:SlowFirstStep", monkeypatch, **{"eval.every_steps": 100})
    steady = r.throughput["steady_samples_per_s"]
    batch = r.samples // r.steps
    assert steady >= (r.steps - 1) * batch / (r.total_s - DELAY_S) * 0.999
    assert steady > r.throughput["samples_per_s"]  # the all-steps figure carries the slow step
    assert r.throughput["model_flops_per_s"] == pytest.approx(r.flops_per_sample * steady)
    # the step-time percentiles are steady too: the slow step is not the p99 or the max
    assert r.step_time_s["p99"] < DELAY_S


# ---- the atomic write: fsync the file, link, fsync the folder -----------------------------------------------


def test_write_atomic_fsyncs_the_file_before_the_link_and_the_folder_after(tmp_path, monkeypatch):
    events: list[tuple[str, str]] = []
    real_fsync, real_link = os.fsync, os.link

    def fsync(fd: int) -> None:
        target = os.readlink(f"/proc/self/fd/{fd}")
        events.append(("fsync", "folder" if os.path.isdir(target) else Path(target).name))
        real_fsync(fd)

    def link(src, dst, *a, **kw) -> None:
        events.append(("link", Path(dst).name))
        real_link(src, dst, *a, **kw)

    monkeypatch.setattr(results_mod.os, "fsync", fsync)
    monkeypatch.setattr(results_mod.os, "link", link)
    path = results_mod.write_atomic(tmp_path / "sub" / "r.json", "{}")
    assert path.read_text() == "{}"
    assert [e[0] for e in events] == ["fsync", "link", "fsync"], events
    assert events[0][1].startswith(".tmp-") and events[0][1].endswith(".part")  # the data, before it is visible
    assert events[1] == ("link", "r.json")
    assert events[2] == ("fsync", "folder")  # the new name itself is durable
    assert not list(path.parent.glob(".tmp-*"))


def test_write_atomic_links_from_a_flushed_temporary_in_the_same_folder_and_leaks_nothing(tmp_path, monkeypatch):
    """The temporary lies in the result's own folder (one file system: the link is atomic), holds every byte
    (UTF-8) when it is fsynced, is gone afterwards, and no file descriptor stays open."""
    links: list[tuple[Path, Path]] = []
    sizes: list[int] = []
    real_fsync, real_link = os.fsync, os.link

    def fsync(fd: int) -> None:
        sizes.append(os.fstat(fd).st_size)
        real_fsync(fd)

    def link(src, dst, *a, **kw) -> None:
        links.append((Path(src), Path(dst)))
        real_link(src, dst, *a, **kw)

    monkeypatch.setattr(results_mod.os, "fsync", fsync)
    monkeypatch.setattr(results_mod.os, "link", link)
    text = '{"note": "µs, ±2 %, naïve"}\n'
    path = results_mod.write_atomic(tmp_path / "a" / "b" / "r.json", text)  # two folders that do not exist yet
    assert path == tmp_path / "a" / "b" / "r.json" and path.read_bytes() == text.encode("utf-8")
    assert links[0][0].parent == path.parent and links[0][1] == path
    assert sizes[0] == len(text.encode("utf-8"))  # flushed before the fsync, not only at close
    second = results_mod.write_atomic(path.parent / "s.json", "{}")  # the folder exists now: fine
    assert second.read_text() == "{}"
    open_paths = {os.path.realpath(f"/proc/self/fd/{fd}") for fd in os.listdir("/proc/self/fd")}
    assert str(path.parent.resolve()) not in open_paths  # the folder's descriptor is closed again
    with pytest.raises(FileExistsError):
        results_mod.write_atomic(path, "{}")  # append-only: never replaced
    assert path.read_bytes() == text.encode("utf-8")
    assert sorted(p.name for p in path.parent.iterdir()) == ["r.json", "s.json"]  # no temporary left behind


def test_write_run_writes_the_side_car_before_the_result_each_atomically(tmp_path, monkeypatch):

    order: list[str] = []
    real = results_mod.write_atomic

    def spy(path: Path, text: str) -> Path:
        order.append(path.suffix)
        return real(path, text)

    monkeypatch.setattr(results_mod, "write_atomic", spy)
    path = results_mod.write_run(tmp_path, make_result(), ":::MLLOG {}\n")
    assert order == [".mllog", ".json"]
    assert results_mod.read_result(path).mllog == path.with_suffix(".mllog").name


def _write_run_failing(tmp_path, monkeypatch, fail: dict[str, BaseException], mllog: str | None = ":::MLLOG {}\n"):
    """write_run with write_atomic failing once per suffix named in `fail` (the first time that suffix is written)."""

    real, failed = results_mod.write_atomic, set()

    def flaky(path: Path, text: str) -> Path:
        if path.suffix in fail and path.suffix not in failed:
            failed.add(path.suffix)
            raise fail[path.suffix]
        return real(path, text)

    monkeypatch.setattr(results_mod, "write_atomic", flaky)
    result = make_result()
    return result, (lambda: results_mod.write_run(tmp_path, result, mllog))


def test_write_run_without_a_log_names_none_and_is_diffable_json(tmp_path):

    path = results_mod.write_run(tmp_path, make_result(), None)
    assert results_mod.read_result(path).mllog is None and not list(tmp_path.rglob("*.mllog"))
    assert path.read_text().count("\n") > 20  # one field a line: results are reviewed as diffs


def test_a_side_car_that_cannot_be_written_is_said_and_not_named(tmp_path, monkeypatch):
    result, write = _write_run_failing(tmp_path, monkeypatch, {".mllog": OSError(28, "No space left on device")})
    path = write()
    back = results_mod.read_result(path)
    assert back.mllog is None and not list(tmp_path.rglob("*.mllog"))
    (warning,) = [w for w in back.warnings if "MLLOG" in w]
    assert "the MLLOG log could not be written" in warning
    assert f"({path.with_suffix('.mllog')}: No space left on device)" in warning  # the path and the reason


@pytest.mark.parametrize("error,reason", [(OSError(30, "Read-only file system"), "Read-only file system"),
                                          (OSError("the disk went away"), "the disk went away")])
def test_a_result_that_cannot_be_written_names_path_and_reason_and_leaves_no_orphan_log(tmp_path, monkeypatch,
                                                                                        error, reason):
    result, write = _write_run_failing(tmp_path, monkeypatch, {".json": error})
    with pytest.raises(results_mod.ResultWriteError) as info:
        write()
    expected = results_mod.result_path(tmp_path, result)
    assert info.value.path == expected and info.value.reason == reason
    assert str(info.value) == f"cannot write result: {expected}: {reason}"
    assert not list(tmp_path.rglob("*.mllog")) and not list(tmp_path.rglob("*.json"))  # no orphan side-car


def test_a_result_name_collision_takes_a_fresh_id_and_names_no_log(tmp_path, monkeypatch):
    result, write = _write_run_failing(tmp_path, monkeypatch, {".json": FileExistsError("taken")})
    first_id = result.run_id
    path = write()
    back = results_mod.read_result(path)
    assert back.run_id != first_id and back.run_id in path.name and path.parent.is_relative_to(tmp_path)
    assert back.mllog is None  # the log written beside the first name belongs to no result


# ---- documented defaults, by behaviour (not by the imported constants) -------------------------------------


@pytest.mark.parametrize("slowdown,verdict", [(1.06, "regressed"), (1.04, "no significant change")])
def test_default_noise_floor_is_five_percent(tmp_path, slowdown, verdict):
    """docs/compare.md: without `compare.noise_floor` in the spec the floor is 5%: a 6% slower time per step
    (runs almost noise-free, complete separation) regresses, a 4% one does not."""
    rng = random.Random(5)
    base = noisy_runs(rng, 6, cv_steps=0.0005, cv_time=0.0005)
    cand = noisy_runs(rng, 6, cv_steps=0.0005, cv_time=0.0005, time_per_step_s=0.01 * slowdown, first_seed=10)
    write_all(tmp_path / "base", base)
    write_all(tmp_path / "cand", cand)
    report = cmp.compare([tmp_path / "base"], [tmp_path / "cand"], compare_model.Settings())
    (pair,) = report.pairs
    assert pair.noise_floor_source == "default"
    assert pair.metric("time_per_step_s").verdict == verdict


def test_default_stall_window_is_max_of_a_minute_and_a_quarter_of_the_budget():
    """docs/reliability.md: stall window max(60 s, budget.max_train_s / 4) unless budget.watchdog_s is set;
    the whole run may take the budget plus one stall window; a budget whose clock may be `own` (a CPU run gets the
    time a busy host made it wait back) up to WALL_CAP times the budget, plus one stall window."""
    assert Limits.for_budget(Budget(max_train_s=60)).stall_s == 60.0
    assert Limits.for_budget(Budget(max_train_s=200)).stall_s == 60.0
    assert Limits.for_budget(Budget(max_train_s=400)).stall_s == 100.0
    assert Limits.for_budget(Budget(max_train_s=400, clock="wall")).run_s == 500.0
    assert Limits.for_budget(Budget(max_train_s=400)).run_s == 400 * 20 + 100.0
    assert Limits.for_budget(Budget(max_train_s=400, watchdog_s=5)).stall_s == 5.0


# ---- the site's Content-Security-Policy ---------------------------------------------------------------------


class _Meta(HTMLParser):
    def __init__(self) -> None:
        super().__init__()
        self.csp: list[str] = []

    def handle_starttag(self, tag, attrs) -> None:
        a = dict(attrs)
        if tag == "meta" and (a.get("http-equiv") or "").lower() == "content-security-policy":
            self.csp.append(a.get("content") or "")


def test_every_site_page_carries_a_strict_csp(tmp_path):
    write_standard(tmp_path / "results")
    write_hostile(tmp_path / "results")
    build_site(tmp_path / "results", tmp_path / "out")
    pages = sorted((tmp_path / "out").rglob("*.html"))
    assert len(pages) > 5
    for page in pages:
        meta = _Meta()
        meta.feed(page.read_text())
        assert len(meta.csp) == 1, page
        policy = {d.split()[0]: d.split()[1:] for d in (p.strip() for p in meta.csp[0].split(";")) if d}
        assert policy.get("script-src") == ["'self'"], (page, meta.csp)
        assert policy.get("default-src") == ["'none'"], (page, meta.csp)
        assert "unsafe-inline" not in meta.csp[0] and "unsafe-eval" not in meta.csp[0], page
    # every site page template (each page's folder, suite/site/pages/<page>/) inherits the policy from the base
    # template (one that does not has no policy); study.html is not a site page: `trainbench study` writes it
    # into the study's own folder (it lives in suite/studies/)
    templates = sorted((ROOT / "suite" / "site" / "pages").glob("*/*.html"))
    assert len(templates) >= 6, templates
    for template in templates:
        if not template.name.startswith("_"):
            assert re.search(r'{%\s*extends\s+"base\.html"\s*%}', template.read_text()), template


# ---- small promises whose mutants survived the first `make mutation` (docs/testing.md) ----------------------


def test_samples_per_s_without_the_first_step_by_hand():
    # (no 'steady' in the name: `make mutation`'s test selection deselects -k steady, the in-process harness test)
    from suite.measure import metrics

    assert metrics.steady_samples_per_s([10.0, 1.0, 3.0], 8) == pytest.approx(4.0)  # the 10 s step, and it alone, out
    assert metrics.steady_samples_per_s([5.0, 5.0, 1.0, 1.0], 2, skip_first=2) == pytest.approx(2.0)
    assert metrics.steady_samples_per_s([2.0], 4) == pytest.approx(2.0)  # one step: nothing to leave out
    assert metrics.steady_samples_per_s([0.0, 0.0], 4) is None  # no time measured: no figure, no division
    assert metrics.steady_samples_per_s([0.5, 0.25, 0.25], 4) == pytest.approx(16.0)  # steps of under a second
    assert metrics.model_flops_per_s(3.0, 4.0) == 12.0
    assert metrics.model_flops_per_s(None, 4.0) is None and metrics.model_flops_per_s(3.0, None) is None


def test_step_time_summary_by_hand():
    """The percentiles are of the steady steps (the first apart, as `first`), every key named as documented."""
    from suite.measure import metrics

    assert metrics.step_time_summary([]) == {}
    # steady [1, 2, 3]: p90 at position 1.8, p99 at 1.98 (linear interpolation, numpy's default)
    assert metrics.step_time_summary([4.0, 1.0, 2.0, 3.0]) == pytest.approx(
        {"p50": 2.0, "p90": 2.8, "p99": 2.98, "mean": 2.0, "first": 4.0, "count": 4.0})
    # one step: nothing is left to be steady, so the figures are of that step
    assert metrics.step_time_summary([5.0]) == {"p50": 5.0, "p90": 5.0, "p99": 5.0, "mean": 5.0, "first": 5.0,
                                               "count": 1.0}
    two = metrics.step_time_summary([9.0, 8.0, 1.0, 3.0], skip_first=2)
    assert two["p50"] == pytest.approx(2.0) and two["mean"] == pytest.approx(2.0) and two["first"] == 9.0
    assert two["count"] == 4.0  # every step is counted, the skipped ones too


def test_throughput_by_hand():
    from suite.measure import metrics

    assert metrics.throughput(100, 1, 0.0, 0.0) == {} and metrics.throughput(100, 1, -1.0, 0.0) == {}
    assert metrics.throughput(100, 1, 4.0, 1.0) == {"samples_per_s": 25.0, "data_wait_fraction": 0.25}
    assert metrics.throughput(100, 1, 4.0, 10.0)["data_wait_fraction"] == 1.0  # a share, never above the whole
    assert metrics.throughput(100, 2, 4.0, 0.0) == {"samples_per_s": 25.0, "data_wait_fraction": 0.0,
                                                    "tokens_per_s": 50.0}
    assert metrics.throughput(100, 8, 4.0, 0.0)["tokens_per_s"] == 200.0
    assert metrics.throughput(100, 1, 0.5, 0.0)["samples_per_s"] == 200.0  # under a second is still a time


def test_per_device_by_hand():
    from suite.measure import metrics

    figures = {"samples_per_s": 8.0, "tokens_per_s": 2.0}
    assert metrics.per_device(figures, 2, ["samples_per_s", "absent"]) == {"samples_per_s_per_device": 4.0}
    assert metrics.per_device(figures, 1, ["tokens_per_s"]) == {"tokens_per_s_per_device": 2.0}  # one device
    assert metrics.per_device(figures, 0, ["samples_per_s"]) == {}


def test_step_time_report_prefers_device_events_and_keeps_the_host_figures_beside():
    from suite.measure import metrics

    report = metrics.step_time_report([1.0, 0.1, 0.2], [0.9, 0.3, 0.5])
    assert report == pytest.approx({
        "p50": 0.4, "p90": 0.48, "p99": 0.498, "mean": 0.4, "first": 0.9, "count": 3.0,  # the device's steps
        "host_p50": 0.15, "host_p90": 0.19, "host_p99": 0.199, "host_mean": 0.15,  # the host's, beside
        "device_events": 1.0})
    assert metrics.step_time_report([1.0, 0.1, 0.2], []) == metrics.step_time_summary([1.0, 0.1, 0.2])


def test_utilization_by_hand():
    from suite.measure import metrics

    assert metrics.utilization(2e12, 1, 4e12) == pytest.approx(0.5)  # one device is a device
    assert metrics.utilization(4e12, 2, 1e12) == pytest.approx(2.0)
    assert metrics.utilization(2e12, 0, 4e12) is None
    assert metrics.utilization(None, 1, 4e12) is None and metrics.utilization(2e12, 1, None) is None


def test_redaction_replaces_the_longest_secret_first(monkeypatch):
    """Secrets that contain one another: the longer one is replaced whole, so no tail of it is printed."""
    from suite import github
    from suite.github import transport

    monkeypatch.setattr(transport, "_SECRETS", set())  # only this test's secrets (a process keeps what it was given)
    github.register_secret("zq9v")
    github.register_secret("AAzq9vLONGERSECRETTAIL")  # sorts before the short one: only length orders them right
    assert github.redact("token AAzq9vLONGERSECRETTAIL and zq9v") == "token *** and ***"


def test_a_secret_of_four_characters_is_redacted_and_a_shorter_one_is_not(monkeypatch):
    """A one-letter "secret" would redact every such letter; four is the shortest that counts."""
    from suite import github
    from suite.github import transport

    monkeypatch.setattr(transport, "_SECRETS", set())
    github.register_secret("k7q2")
    github.register_secret("w3x")
    assert github.redact("k7q2 w3x") == "*** w3x"


def test_the_token_never_shows_and_never_pickles():
    import pickle

    from suite import github

    client = github.GitHub(token="ghp_neverShownAnywhere0123")
    assert "ghp_neverShownAnywhere0123" not in repr(client) and "***" in repr(client)
    auth = client._auth
    assert "ghp_neverShownAnywhere0123" not in repr(auth) + str(auth) and "***" in repr(auth)
    assert repr(auth) == str(auth) == "_TokenAuth(***)"
    with pytest.raises(TypeError, match=r"^the GitHub token cannot be pickled$"):
        pickle.dumps(auth)


@pytest.mark.parametrize("repo", ["owner/..", "../name", "owner/na..me", "", "owner", "a/b/c"])
def test_repository_names_are_checked_before_any_request(repo):
    from suite import github

    with pytest.raises(ValueError, match="expected OWNER/NAME"):
        github.check_repo(repo)


def test_kv_rows_escape_keys_and_values_and_mark_mono_cells():
    from suite.site.render import kv_rows

    mono = str(kv_rows([("<k>", "<script>x</script>")], mono=True))
    assert mono == ('<tr><th class="mono">&lt;k&gt;</th>'
                    '<td class="mono">&lt;script&gt;x&lt;/script&gt;</td></tr>')
    assert str(kv_rows([("k", "v"), ("j", "w")])) == "<tr><th>k</th><td>v</td></tr><tr><th>j</th><td>w</td></tr>"
    assert "x" * 1500 in str(kv_rows([("long", "x" * 1500)]))  # a run page shows up to 2,000 characters a cell
    assert str(kv_rows([("long", "x" * 2001)])) == f"<tr><th>long</th><td>{'x' * 1999}…</td></tr>"
    # a text that holds NULs itself (the one-pass escape joins texts by NUL) still keeps its row and is escaped
    assert str(kv_rows([("a\x00<b>", "<v>")])) == "<tr><th>a\x00&lt;b&gt;</th><td>&lt;v&gt;</td></tr>"
    assert str(kv_rows([("a\x00b\x00c", "v")])) == "<tr><th>a\x00b\x00c</th><td>v</td></tr>"


def test_cell_text_by_hand():
    """What a site table cell shows (escaped afterwards by kv_rows or the templates): exact forms and the cut."""
    from suite.site.cells import cell_text

    assert cell_text("abc") == "abc" and cell_text(0.123456789) == "0.123457"
    assert (cell_text(None), cell_text(True), cell_text(False), cell_text(3)) == ("null", "true", "false", "3")
    # subclasses of the plain kinds (numpy's float64, a str or int enum) read as their plain kind
    import enum

    import numpy as np

    class Colour(enum.StrEnum):
        RED = "red"

    class Big(enum.IntEnum):
        N = 1234567

    assert (cell_text(np.float64(0.123456789)), cell_text(Colour.RED), cell_text(Big.N)) == (
        "0.123457", "red", "1234567")
    assert cell_text({"b": 1, "a": [1, 2], "p": Path("/x")}) == '{"a": [1, 2], "b": 1, "p": "/x"}'
    assert cell_text("x" * 400) == "x" * 400  # at the limit: whole
    assert cell_text("x" * 401) == "x" * 399 + "…" and len(cell_text("y" * 5000, 2000)) == 2000


def test_a_run_that_did_not_reach_counts_as_infinite_whatever_time_it_carries():
    """DESIGN: a run that never converges counts as infinite, never as missing, and never as its own time."""
    import math

    from benchmarks.sim.results import simulated_result
    from suite.results.stats import tta_or_inf

    reached = simulated_result(0, steps_to_target=100, time_per_step_s=0.01)
    assert tta_or_inf(reached) == reached.time_to_target_s
    assert tta_or_inf(reached.model_copy(update={"status": "budget"})) == math.inf  # a time, but not reached
    assert tta_or_inf(reached.model_copy(update={"time_to_target_s": None})) == math.inf


def test_the_site_environment_escapes_and_refuses_what_it_does_not_know(tmp_path, monkeypatch):
    """Every template autoescapes; a name a template uses but nobody passed is an error, never an empty cell; `inf`
    is what a failed run's time is compared with; a checkout without the templates is named."""
    import jinja2

    from suite.site import job, pages
    from suite.site.output import SiteError

    env = job.environment()
    assert env.from_string("{{ v }}").render(v="<script>") == "&lt;script&gt;"
    with pytest.raises(jinja2.UndefinedError):
        env.from_string("<td>{{ nobody_passed_this }}</td>").render()
    assert env.from_string("{{ 'not reached' if v == inf else v }}").render(v=float("inf")) == "not reached"
    monkeypatch.setattr(job.jinja2, "PackageLoader", lambda package, path: jinja2.FileSystemLoader(str(tmp_path)))
    monkeypatch.setattr(pages, "template_loaders", lambda: [])
    with pytest.raises(SiteError, match=r"templates: site templates are missing \(is this a full checkout"):
        job.environment()
