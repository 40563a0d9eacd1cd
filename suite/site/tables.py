"""The submissions and runs tables of the workload and month pages, built in Python: a month of a workload has
thousands of rows, and jinja's macro calls (a status badge and a TTA cell a row) made them most of the time
of an incremental build. Every text from a result goes through html.escape; the markup is the same as the
templates' macros (`status`, `tta_cell` in suite/site/templates/_macros.html) write."""

from __future__ import annotations

import math
from collections.abc import Sequence
from html import escape

from markupsafe import Markup

from suite.site.data import RunRow, Submission
from suite.site.render import fmt_date, fmt_num, fmt_pct, fmt_s, sort_value

STATUSES = ("reached", "budget", "diverged", "error", "interrupted")
_SYNTHETIC = ' <span class="badge synthetic" title="read `trainbench data prepare --synthetic` files: ' \
             'off the leaderboards">synthetic data</span>'

_LOADED = ' <span class="badge loaded" title="measured on a loaded host (its load above the core count at the start, ' \
          'during or at the end of its clock): off the leaderboards">loaded host</span>'


def _variant(name: str) -> str:
    return (f' <span class="badge variant" title="the spec\'s variant {escape(name)}: another model or data size than '
            f'the workload\'s description; off the leaderboards">variant {escape(name)}</span>') if name else ""


def _tta_cell(v: float, cls: str = "num") -> str:
    title = ' title="target not reached"' if v == math.inf else ""
    return f'<td class="{cls}" data-sort="{sort_value(v)}"{title}>{fmt_s(v)}</td>'


def _status(s: str) -> str:
    return f'<span class="st st-{escape(s) if s in STATUSES else "other"}">{escape(s)}</span>'


def submission_rows(subs: Sequence[Submission], root: str) -> Markup:
    """The submissions table body, newest first."""
    out = []
    for s in reversed(subs):
        a = s.agg
        seeds = " ".join(f'<a class="st-{escape(rr.status)}" href="{root}{rr.page}">{rr.seed}</a>' for rr in s.runs)
        out.append(
            f'<tr><td class="nowrap" data-sort="{s.timestamp}">{fmt_date(s.latest.started_at)}</td>'
            f"<td>{escape(s.hardware)}</td><td>{escape(s.backend)}{_SYNTHETIC if s.synthetic else ''}"
            f"{_variant(s.variant)}{_LOADED if s.loaded else ''}</td>"
            f"<td>{escape(s.precision)}</td>\n"
            f'<td class="mono">{escape(s.sha[:10])}</td><td class="mono">{escape(s.spec_hash[:8])}</td>'
            f'{_tta_cell(a.tta_olympic_s, "num strong")}{_tta_cell(a.tta_min_s)}{_tta_cell(a.tta_max_s)}\n'
            f'<td class="num" data-sort="{sort_value(a.success_rate)}">{a.reached}/{a.runs}</td>'
            f'<td class="num" data-sort="{sort_value(a.samples_per_s_median)}">{escape(fmt_num(a.samples_per_s_median))}</td>\n'
            f'<td class="num" data-sort="{sort_value(a.mfu_median)}">{fmt_pct(a.mfu_median)}</td>\n'
            f'<td class="seeds">{seeds}</td></tr>\n')
    return Markup("".join(out))


def phase_rows(runs: Sequence[RunRow], root: str) -> Markup:
    """RL post-training runs: each step's time split into rollout (generation) and training, newest first."""
    out = []
    for r in reversed(runs):
        if r.rollout_s_per_step is None and r.training_s_per_step is None:
            continue
        out.append(
            f'<tr><td class="nowrap" data-sort="{r.started_at.timestamp()}">{fmt_date(r.started_at)}</td>'
            f'<td>{escape(r.hardware)}</td><td>{escape(r.backend)}</td><td class="num">{r.seed}</td>'
            f'<td class="num" data-sort="{sort_value(r.rollout_s_per_step)}">{fmt_s(r.rollout_s_per_step)}</td>'
            f'<td class="num" data-sort="{sort_value(r.training_s_per_step)}">{fmt_s(r.training_s_per_step)}</td>'
            f'<td class="mono"><a href="{root}{r.page}">{escape(r.run_id)}</a></td></tr>\n')
    return Markup("".join(out))


def run_rows(runs: Sequence[RunRow], root: str) -> Markup:
    """The runs table body, newest first."""
    out = []
    for r in reversed(runs):
        out.append(
            f'<tr><td class="nowrap" data-sort="{r.started_at.timestamp()}">{fmt_date(r.started_at)}</td>'
            f'<td>{escape(r.hardware)}</td><td>{escape(r.backend)}</td><td class="num">{r.seed}</td>\n'
            f"<td>{_status(r.status)}{_SYNTHETIC if r.synthetic else ''}{_variant(r.variant)}{_LOADED if r.loaded else ''}</td>{_tta_cell(r.tta())}<td class=\"num\">{r.n_steps}</td>"
            f'<td class="num" data-sort="{sort_value(r.train_s)}">{fmt_s(r.train_s)}</td>\n'
            f'<td class="num" data-sort="{sort_value(r.samples_per_s)}">{escape(fmt_num(r.samples_per_s))}</td>'
            f'<td class="mono"><a href="{root}{r.page}">{escape(r.run_id)}</a></td></tr>\n')
    return Markup("".join(out))
