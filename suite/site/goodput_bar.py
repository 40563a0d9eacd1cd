"""The run page's wall-clock bar: one stacked bar of Result.goodput's parts (suite/measure/goodput.py).

Inline SVG; colours are SVG presentation attributes (fill), never style attributes, so the page keeps its strict
Content-Security-Policy. Each segment carries a <title> (its part, seconds and share) that a browser shows on hover.
"""

from __future__ import annotations

from markupsafe import Markup, escape

from suite.results.record import Goodput

# one colour per part, in the order of suite/measure/goodput.PARTS (productive steps green, failure costs red)
COLOURS = {
    "startup_s": "#9e9e9e", "init_s": "#7e57c2", "checkpoint_restore_s": "#26a69a", "compile_s": "#ff7043",
    "steps_s": "#43a047", "data_wait_s": "#fbc02d", "eval_s": "#1e88e5", "checkpoint_save_s": "#00897b",
    "lost_s": "#e53935", "recovery_s": "#ad1457", "other_s": "#bdbdbd", "teardown_s": "#616161",
}
LABELS = {
    "startup_s": "start-up", "init_s": "init", "checkpoint_restore_s": "checkpoint restore", "compile_s": "compile",
    "steps_s": "training steps", "data_wait_s": "data wait", "eval_s": "evaluation",
    "checkpoint_save_s": "checkpoint save", "lost_s": "work lost", "recovery_s": "recovery", "other_s": "other",
    "teardown_s": "teardown",
}


def goodput_bar(g: Goodput | None, width: int = 900, height: int = 28) -> Markup:
    """The stacked bar with its legend, or an empty Markup for a result without an account (schema 2)."""
    if g is None or g.wall_s <= 0:
        return Markup("")
    total = sum(max(0.0, v) for v in g.parts_s.values()) or g.wall_s
    out = [f'<svg class="goodput-bar" id="goodput-bar" role="img" width="{width}" height="{height + 4}" '
           f'viewBox="0 0 {width} {height + 4}" preserveAspectRatio="none" xmlns="http://www.w3.org/2000/svg"><title>where the '
           f'{g.wall_s:.3g} s of wall clock went</title>']
    x = 0.0
    legend = []
    for part, seconds in g.parts_s.items():
        if seconds <= 0:
            continue
        w = width * seconds / total
        share = seconds / g.wall_s
        label = LABELS.get(part, part)
        colour = COLOURS.get(part, "#bdbdbd")
        out.append(f'<rect data-part="{escape(part)}" x="{x:.2f}" y="2" width="{max(w, 0.5):.2f}" height="{height}" '
                   f'fill="{colour}"><title>{escape(label)}: {seconds:.3g} s ({share:.1%})</title></rect>')
        legend.append(f'<li data-part="{escape(part)}"><svg width="10" height="10" aria-hidden="true">'
                      f'<rect width="10" height="10" fill="{colour}"/></svg> {escape(label)} '
                      f'<span class="mono">{seconds:.3g} s</span> <span class="muted">({share:.1%})</span></li>')
        x += w
    out.append("</svg>")
    return Markup("".join(out) + '<ul class="goodput-legend inline small">' + "".join(legend) + "</ul>")
