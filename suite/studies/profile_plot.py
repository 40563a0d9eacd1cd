"""A study's performance profiles as an inline SVG: `trainbench study` writes it as profile.svg and the site's study
page shows the same drawing (it moved here from suite/site/charts.py, so that studies import nothing of the site)."""

from __future__ import annotations

from suite.studies.report import StudyReport

PROFILE_PALETTE = ("#1f77b4", "#d62728", "#2ca02c", "#9467bd", "#ff7f0e", "#17becf", "#8c564b", "#e377c2")


def _esc(text: str) -> str:
    return text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;").replace('"', "&quot;")


def profile_svg(report: StudyReport, width: int = 640, height: int = 380) -> str:
    """The profiles rho_a(tau) as step lines on [1, tau_max], one colour per algorithm, scores in the legend."""
    tau_max = report.tau_max
    left, right, top, bottom = 56, 170, 28, 48
    pw, ph = width - left - right, height - top - bottom

    def x(tau: float) -> float:
        return left + (tau - 1.0) / (tau_max - 1.0) * pw

    def y(frac: float) -> float:
        return top + (1.0 - frac) * ph

    parts = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" '
             f'viewBox="0 0 {width} {height}" font-family="sans-serif" font-size="12" role="img">',
             f'<title>Performance profiles, study {_esc(report.name)}</title>',
             f'<rect x="{left}" y="{top}" width="{pw}" height="{ph}" fill="none" stroke="#999"/>']
    for i in range(6):
        frac = i / 5
        parts.append(f'<line x1="{left}" x2="{left + pw}" y1="{y(frac):.1f}" y2="{y(frac):.1f}" stroke="#eee"/>')
        parts.append(f'<text x="{left - 6}" y="{y(frac) + 4:.1f}" text-anchor="end">{frac:.1f}</text>')
    ticks = 6
    for i in range(ticks + 1):
        tau = 1.0 + (tau_max - 1.0) * i / ticks
        parts.append(f'<text x="{x(tau):.1f}" y="{top + ph + 16}" text-anchor="middle">{tau:.2g}</text>')
    parts.append(f'<text x="{left + pw / 2}" y="{height - 10}" text-anchor="middle">'
                 'tau (time to target / best time to target)</text>')
    parts.append(f'<text transform="translate(14 {top + ph / 2}) rotate(-90)" text-anchor="middle">'
                 'share of workloads within tau</text>')
    score_of = {row.algorithm: row.score for row in report.scores}
    for i, algo in enumerate(report.algorithms):
        colour = PROFILE_PALETTE[i % len(PROFILE_PALETTE)]
        pts = report.profiles[algo]
        d = f"M{x(pts[0][0]):.1f},{y(pts[0][1]):.1f}"
        for (_, prev_rho), (tau, frac) in zip(pts, pts[1:], strict=False):
            d += f" H{x(tau):.1f} V{y(frac):.1f}" if frac != prev_rho else f" H{x(tau):.1f}"
        dash = ' stroke-dasharray="6 3"' if i % 2 else ""
        parts.append(f'<path d="{d}" fill="none" stroke="{colour}" stroke-width="2.5"{dash}>'
                     f'<title>{_esc(algo)}</title></path>')
        ly = top + 14 + i * 18
        parts.append(f'<line x1="{left + pw + 12}" x2="{left + pw + 32}" y1="{ly - 4}" y2="{ly - 4}" '
                     f'stroke="{colour}" stroke-width="2.5"{dash}/>')
        short = algo if len(algo) <= 20 else algo[:19] + "…"  # the full name is in the line's <title>
        parts.append(f'<text x="{left + pw + 38}" y="{ly}">{_esc(short)} ({score_of[algo]:.3f})</text>')
    parts.append("</svg>")
    return "\n".join(parts)
