"""compare's outputs: the JSON report (docs/compare.md documents every field) and the Markdown PR comment."""

from __future__ import annotations

import math
from dataclasses import asdict
from pathlib import Path
from typing import Any

from suite.compare.model import (
    DEFAULT_MIN_RUNS,
    DEFAULT_MIN_STEPS,
    DEFAULT_THROUGHPUT_FLOOR,
    EXIT_OK,
    IMPROVED,
    NO_CHANGE,
    NOT_COMPARABLE,
    REGRESSED,
    REPORT_SCHEMA_VERSION,
    SAME,
    SEVERITY,
    SUSPICIOUS,
    MetricResult,
    PairReport,
    Report,
    Settings,
    SideInfo,
    Summary,
    Verdict,
)


def _f(x: float | None) -> float | str | None:
    """A float for JSON, which has no infinity or NaN: inf -> "inf", NaN -> null."""
    if x is None or math.isnan(x):
        return None
    if math.isinf(x):
        return "inf" if x > 0 else "-inf"
    return x


def _summary_json(x: Summary | None) -> dict[str, Any] | None:
    return None if x is None else {"n": x.n, "center": _f(x.center), "median": _f(x.median), "min": _f(x.min),
                                   "max": _f(x.max)}


def _side_json(x: SideInfo) -> dict[str, Any]:
    return {"spec_hash": x.spec_hash, "workload_version": x.workload_version, "runs": x.runs, "reached": x.reached,
            "success_rate": _f(x.success_rate)}


def _metric_json(m: MetricResult) -> dict[str, Any]:
    return {"name": m.name, "label": m.label, "unit": m.unit, "lower_is_better": m.lower_is_better,
            "gating": m.gating, "verdict": m.verdict, "baseline": _summary_json(m.baseline),
            "candidate": _summary_json(m.candidate), "ratio": _f(m.ratio), "p_value": _f(m.p_value),
            "p_any_change": _f(m.p_any_change), "exact": m.exact, "ci_low": _f(m.ci_low), "ci_high": _f(m.ci_high),
            "note": m.note}


def to_json(report: Report) -> dict[str, Any]:
    """The machine-readable report; docs/compare.md documents every field. (Built by hand, not with
    dataclasses.asdict, which was a third of the time of a 10,000-file compare.)"""
    pairs = [{
        "hardware": p.hardware, "workload": p.workload, "backend": p.backend, "verdict": p.verdict,
        "reason": p.reason, "cause": p.cause, "cause_detail": p.cause_detail, "noise_floor": _f(p.noise_floor),
        "noise_floor_source": p.noise_floor_source, "baseline": _side_json(p.baseline),
        "candidate": _side_json(p.candidate), "metrics": [_metric_json(m) for m in p.metrics],
        "mode": p.mode, "floor_note": p.floor_note,
        "warnings": p.warnings, "rcp": p.rcp, "rcp_note": p.rcp_note,
        "phase": p.phase,
    } for p in report.pairs]
    return {
        "schema_version": REPORT_SCHEMA_VERSION,
        "kind": "trainbench-compare",
        "settings": asdict(report.settings),
        "summary": {**{k.replace(" ", "_"): v for k, v in report.counts.items()}, "pairs": len(report.pairs),
                    "exit_code": report.exit_code, "baseline_files": report.baseline_files,
                    "candidate_files": report.candidate_files, "bad_files": len(report.errors),
                    "left_out": len(report.left_out)},
        "pairs": pairs,
        "errors": report.errors,
        "left_out": report.left_out,
    }


def fmt(value: float | None, unit: str) -> str:
    if value is None or math.isnan(value):
        return "-"
    if math.isinf(value):
        return "∞"
    if unit == "bytes":
        for div, u in ((2**30, "GiB"), (2**20, "MiB"), (2**10, "KiB")):
            if abs(value) >= div:
                return f"{value / div:.3g} {u}"
        return f"{value:.0f} B"
    if unit == "":  # a fraction (MFU)
        return f"{value:.1%}"
    if unit == "steps":
        return f"{value:,.0f}"
    if unit == "plain":
        return f"{value:,.4g}"
    if unit == "s" and abs(value) < 0.1:
        return f"{value * 1e3:.3g} ms"
    return f"{value:,.4g} {unit}"


def _ratio_text(m: MetricResult | None) -> str:
    if m is None or m.ratio is None:
        return "-"
    if m.ci_low is not None and m.ci_high is not None:
        return f"×{m.ratio:.3f} [{m.ci_low:.3f}, {m.ci_high:.3f}]"
    return "∞" if math.isinf(m.ratio) else f"×{m.ratio:.3f}"


def _p_text(m: MetricResult | None) -> str:
    return "-" if m is None or m.p_value is None else f"{m.p_value:.3g}"


ICON = {REGRESSED: "🔴", SUSPICIOUS: "🟠", NOT_COMPARABLE: "⚪", IMPROVED: "🟢", SAME: "✅", NO_CHANGE: "✅"}


def summary_line(report: Report) -> str:
    c = report.counts
    head = (f"🔴 **{c[REGRESSED]} regression{'s' * (c[REGRESSED] != 1)}**" if c[REGRESSED]
            else "✅ **no regression**" if report.exit_code == EXIT_OK else "⚪ **nothing comparable**")
    rest = f"{c[IMPROVED]} improved · {c[SAME] + c[NO_CHANGE]} no (significant) change · {c[NOT_COMPARABLE]} not comparable"
    if c[SUSPICIOUS]:
        rest += f" · {c[SUSPICIOUS]} suspicious"
    bad = f" · {len(report.errors)} bad file(s) skipped" if report.errors else ""
    bad += f" · {len(report.left_out)} result(s) of another mode left out" if report.left_out else ""
    return f"{head} in {len(report.pairs)} comparison(s): {rest}{bad}"


MARKDOWN_MAX_CHARS = 60_000  # GitHub refuses comments over 65,536 characters


def _row(p: PairReport) -> str:
    tta = p.metric("time_to_target_s" if p.mode == "tta" else "time_per_step_s")
    base = fmt(tta.baseline.center if tta and tta.baseline else None, "s")
    cand = fmt(tta.candidate.center if tta and tta.candidate else None, "s")
    why = p.reason or p.cause or ""
    if p.rcp and p.rcp.get("verdict") == "converged faster than the reference":
        why = f"⚑ converged faster than the reference (RCP), time to target normalized x{p.rcp['norm_factor']:.3f}" + (
            f"; {why}" if why else "")
    if p.verdict == REGRESSED and not p.cause:
        why = ", ".join(f"{m.label} {_ratio_text(m)}" for m in p.metrics if m.gating and m.verdict == REGRESSED)
    if p.phase:  # RL post-training: which part of the step moved
        why = f"**{p.phase}**" + (f"; {why}" if why else "")
    return (f"| {ICON[p.verdict]} {p.verdict} | `{p.workload}` | {p.backend} | {p.hardware} | "
            f"{base} → {cand} | {_ratio_text(tta)} | {_p_text(tta)} | {why} |")


def to_markdown(report: Report, max_chars: int = MARKDOWN_MAX_CHARS) -> str:
    """The PR comment. Past max_chars, rows and details are cut from the least severe end, saying how many."""
    s = report.settings
    head = [
        "### TrainBench compare", "", summary_line(report), "",
        f"<sub>{s.test}, α = {s.alpha}; a change counts only if significant and beyond the noise floor "
        f"(the spec's `compare.noise_floor`, else {s.default_noise_floor:.0%}); gating metrics: "
        f"{', '.join(s.gate)}. Failed runs count as infinitely slow.</sub>", "",
    ]
    if any(p.mode == "throughput" for p in report.pairs):
        head[4] = (f"<sub>Throughput A/B on one runner: ratio of median step times (candidate / baseline) with a "
                   f"{1 - s.alpha:.0%} two-level bootstrap interval (runs, then steps); `regressed` when the whole "
                   "interval lies beyond the noise floor (measured A/A floor, else the baseline spec's, else "
                   f"{s.throughput_noise_floor:.0%}), `suspicious` when only the point estimate does. The time "
                   "column is the median step time.</sub>")
    tail: list[str] = []
    if report.errors:
        shown = report.errors[:50]
        more = [f"... and {len(report.errors) - len(shown)} more"] if len(report.errors) > len(shown) else []
        tail = [f"<details><summary>{len(report.errors)} bad file(s) skipped</summary>", "",
                "```text", *shown, *more, "```", "", "</details>", ""]  # messages quote with backticks
    if report.left_out:
        shown = report.left_out[:50]
        more = [f"... and {len(report.left_out) - len(shown)} more"] if len(report.left_out) > len(shown) else []
        tail += [f"<details><summary>{len(report.left_out)} result(s) of another mode left out</summary>", "",
                 "```text", *shown, *more, "```", "", "</details>", ""]
    budget = max_chars - sum(len(x) + 1 for x in head + tail) - 400  # room for the two "cut" notes
    what = "time to target" if all(p.mode == "tta" for p in report.pairs) else "median step time"
    table = [f"| | workload | backend | hardware | {what}, baseline → candidate | ratio | p (beyond floor) | cause / reason |",
             "|---|---|---|---|---|---|---|---|"] if report.pairs else []
    budget -= sum(len(x) + 1 for x in table)
    rows = 0
    for p in report.pairs:  # ordered by severity: what is cut is the least severe
        line = _row(p)
        if len(line) + 1 > budget:
            break
        table.append(line)
        budget -= len(line) + 1
        rows += 1
    if rows < len(report.pairs):
        table.append(f"| | ... and {len(report.pairs) - rows} more (least severe): see the JSON report "
                     "(`--json-out`) | | | | | | |")
    details: list[str] = []
    shown_details = 0
    for p in report.pairs[:rows]:
        block = _pair_details(p)
        size = sum(len(x) + 1 for x in block)
        if size > budget:
            break
        details += block
        budget -= size
        shown_details += 1
    if details or rows:
        details = ["", "<details><summary>Details: every metric of every comparison</summary>", "", *details]
        if shown_details < len(report.pairs):
            details.append(f"Details of {len(report.pairs) - shown_details} more comparison(s) are in the JSON report.")
            details.append("")
        details += ["</details>", ""]
    return "\n".join(head + table + details + tail)


def rcp_lines(p: PairReport) -> list[str]:
    """The convergence guard's verdict (MLPerf's RCP check), raw and normalized time to target side by side."""
    if p.rcp_note and not p.rcp:
        return [f"RCP: {p.rcp_note}", ""]
    r = p.rcp
    if not r:
        return []
    mark = "**⚑ converged faster than the reference**" if r["verdict"] == "converged faster than the reference" \
        else f"RCP: {r['verdict']}"
    norm = ""
    if r.get("tta_raw_s") is not None and r["norm_factor"] > 1:
        norm = (f"; time to target normalized as MLPerf does: {fmt(r['tta_normalized_s'], 's')} (raw "
                f"{fmt(r['tta_raw_s'], 's')}, x{r['norm_factor']:.4f} = reference mean / candidate mean)")
    return [f"{mark} — samples to target {r['candidate_mean']:.6g} (olympic mean of {r['candidate_seeds']}) vs the "
            f"reference {r['reference_mean']:.6g} ± {r['reference_stdev']:.3g} ({r['reference_seeds']} seeds, global "
            f"batch {r['global_batch_size']}, {r['how']}); significantly faster below {r['min_mean']:.6g} "
            f"(one-sided p {r['p_faster']:.3g}, MLPerf's rcp_checker at p = 0.05){norm}. RCP: `{r['source']}`", ""]


def _pair_details(p: PairReport) -> list[str]:
    def rate(x: SideInfo) -> str:
        if p.mode == "throughput":  # timed steps, no target: "reached" means nothing here
            return f"{x.runs} throughput run(s)"
        return f"{x.runs} run(s), {x.reached} reached" + (f" ({x.success_rate:.0%})" if x.runs else "")

    out = [f"#### {ICON[p.verdict]} `{p.workload}` · {p.backend} · {p.hardware}", "",
           f"baseline: {rate(p.baseline)}, spec `{p.baseline.spec_hash or '-'}` · candidate: {rate(p.candidate)}, "
           f"spec `{p.candidate.spec_hash or '-'}` · noise floor {p.noise_floor:.1%} ({p.noise_floor_source})", ""]
    if p.floor_note:
        out += [f"note: {p.floor_note}", ""]
    if p.reason:
        out += [f"**not comparable:** {p.reason}", ""]
    out += [f"**warning:** {w}" for w in p.warnings] + ([""] if p.warnings else [])
    if p.cause:
        out += [f"**cause of the time-to-target change:** {p.cause} — {p.cause_detail}", ""]
    out += rcp_lines(p)
    if p.phase:
        out += [f"**RL step phase:** {p.phase} (rollout = generation; training = old/ref log-probs and the update)", ""]
    if p.metrics:
        out += ["| metric | baseline (center, min–max, n) | candidate (center, min–max, n) | ratio | p (beyond floor) | verdict |",
                "|---|---|---|---|---|---|"]
        for m in p.metrics:
            if m.name.startswith("goodput") and m.baseline is None and m.candidate is None:
                continue  # a wall-clock part neither side measured (results before schema 3): no row
            def side(x: Summary | None, unit: str = m.unit) -> str:
                bare = "plain" if unit in ("samples/s", "J") else unit  # the unit once, on the centre
                return "-" if x is None else f"{fmt(x.center, unit)} ({fmt(x.min, bare)}–{fmt(x.max, bare)}, n={x.n})"
            gate = "" if m.gating else " (not gating)"
            note = f" — {m.note}" if m.note and m.note != p.reason else ""
            out.append(f"| {m.label} | {side(m.baseline)} | {side(m.candidate)} | {_ratio_text(m)} | {_p_text(m)} | "
                       f"{m.verdict}{gate if m.verdict in (REGRESSED, IMPROVED) else ''}{note} |")
        out.append("")
    return out


# ---- the typed reader of the JSON report (`to_json` read back; the site reads compare output only so) ------


class ReportError(ValueError):
    """Not a compare report of this schema; the message names the file and what is wrong."""


def _num(x: Any) -> float | None:
    """The inverse of `_f`: "inf" / "-inf" back to infinities, null stays None."""
    if x is None:
        return None
    if x == "inf" or x == "-inf":
        return math.inf if x == "inf" else -math.inf
    if isinstance(x, bool) or not isinstance(x, int | float):
        raise TypeError(f"{x!r} is not a number")
    return float(x)


def _verdict(x: Any) -> Verdict:
    if x not in SEVERITY:
        raise ValueError(f"verdict {x!r} is not one of {', '.join(SEVERITY)}")
    return x  # type: ignore[no-any-return]


def _summary_of(d: Any) -> Summary | None:
    if d is None:
        return None
    c, med, lo, hi = (math.nan if v is None else v for v in map(_num, (d["center"], d["median"], d["min"], d["max"])))
    return Summary(int(d["n"]), c, med, lo, hi)


def _side_of(d: Any) -> SideInfo:
    v = d["workload_version"]
    return SideInfo(d["spec_hash"], None if v is None else int(v), int(d["runs"]), int(d["reached"]))


def _metric_of(d: Any) -> MetricResult:
    return MetricResult(
        str(d["name"]), str(d["label"]), str(d["unit"]), bool(d["lower_is_better"]), bool(d["gating"]),
        _verdict(d["verdict"]), _summary_of(d["baseline"]), _summary_of(d["candidate"]), _num(d["ratio"]),
        _num(d["p_value"]), _num(d["p_any_change"]), d["exact"], str(d["note"]), _num(d.get("ci_low")),
        _num(d.get("ci_high")),
    )


def report_from_json(data: Any, source: str) -> Report:
    """The Report a `to_json` dict describes; ReportError names the source and the field that is wrong."""
    if not isinstance(data, dict) or data.get("kind") != "trainbench-compare":
        raise ReportError(f"{source}: not a compare report (no \"kind\": \"trainbench-compare\"); "
                          "write one with `trainbench compare ... --json-out FILE`")
    if data.get("schema_version") != REPORT_SCHEMA_VERSION:
        raise ReportError(f"{source}: compare report schema_version {data.get('schema_version')!r}; this "
                          f"trainbench reads {REPORT_SCHEMA_VERSION} (re-run compare)")
    try:
        st = data["settings"]
        settings = Settings(alpha=float(st["alpha"]), default_noise_floor=float(st["default_noise_floor"]),
                            min_seeds=int(st["min_seeds"]), gate=tuple(str(g) for g in st["gate"]),
                            test=str(st["test"]),
                            throughput_noise_floor=float(st.get("throughput_noise_floor", DEFAULT_THROUGHPUT_FLOOR)),
                            min_runs=int(st.get("min_runs", DEFAULT_MIN_RUNS)),
                            min_steps=int(st.get("min_steps", DEFAULT_MIN_STEPS)), n_boot=int(st.get("n_boot", 2000)))
        pairs = [PairReport(
            str(p["hardware"]), str(p["workload"]), str(p["backend"]), _verdict(p["verdict"]), _side_of(p["baseline"]),
            _side_of(p["candidate"]), float(_num(p["noise_floor"]) or 0.0), p["noise_floor_source"],
            str(p["reason"]), p["cause"], str(p["cause_detail"]), [_metric_of(m) for m in p["metrics"]],
            [str(w) for w in p.get("warnings", [])], str(p.get("mode", "tta")), str(p.get("floor_note", "")),
            p.get("rcp") if isinstance(p.get("rcp"), dict) else None, str(p.get("rcp_note", "")),
            None if p.get("phase") is None else str(p["phase"]),
        ) for p in data["pairs"]]
        summary = data["summary"]
        return Report(settings, pairs, [str(e) for e in data["errors"]], int(summary["baseline_files"]),
                      int(summary["candidate_files"]), [str(x) for x in data.get("left_out", [])])
    except (KeyError, TypeError, ValueError) as e:
        raise ReportError(f"{source}: not a compare report of schema {REPORT_SCHEMA_VERSION} "
                          f"({type(e).__name__}: {e})") from None


def read_report(path: Path) -> Report:
    """A JSON report written by `trainbench compare --json-out`, as the typed Report it was made from."""
    import json

    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, ValueError) as e:
        raise ReportError(f"{path}: cannot read as JSON: {e}") from None
    except RecursionError:
        raise ReportError(f"{path}: cannot read as JSON: nested too deeply") from None
    return report_from_json(data, str(path))
