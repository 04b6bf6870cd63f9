"""The ledger as a document: Markdown, JSON, or one self-contained HTML page.

The HTML page is what a user attaches to a post-mortem: inline CSS and inline SVG charts (a
timeline bar per job and for the pod, badput by cause, spot against on-demand), no script,
no font, image or stylesheet from anywhere; every number is the ``Book``'s own, so it
matches the Ledger screen and ``status --json``. Element ids and ``data-*`` attributes
(``#totals``, ``#timeline``, ``data-seconds``) are stable: tests and tools read them.
"""

from __future__ import annotations

import html
import json
import time
from typing import Any

from console.services.ledger.book import Book
from console.services.ledger.fleet import Figures, FleetBook
from console.services.ledger.goodput import Unit, dur
from console.services.ledger.timeline import BADPUT, Cause

COLOURS: dict[Cause, str] = {
    Cause.PRODUCTIVE: "#2e9e44",
    Cause.DETECT: "#d62728",
    Cause.RECOVER: "#e8b010",
    Cause.CAPACITY: "#9b4dca",
    Cause.WARMUP: "#17a2b8",
    Cause.REDONE: "#ff6f3c",
    Cause.QUEUED: "#4a7bd0",
    Cause.IDLE: "#c8c8c8",
}
FORMATS = ("md", "html", "json")
FLEET_TITLE = "Phantom preemption ledger: the fleet"


def utc(at: float) -> str:
    return time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime(at))


def _usd(value: Any) -> str:
    return "-" if value is None else f"${value:,.2f}"


def render(book: Book, fmt: str, *, title: str = "Phantom preemption ledger") -> str:
    if fmt == "json":
        return json.dumps(book.to_json(), indent=2) + "\n"
    if fmt == "md":
        return markdown(book, title)
    if fmt == "html":
        return page(book, title)
    raise ValueError(f"format {fmt!r}: one of {', '.join(FORMATS)}")


def render_fleet(fleet: FleetBook, fmt: str, *, title: str = FLEET_TITLE) -> str:
    """A fleet's ledger: a row per cluster and the total, badput by cause per cluster, then
    each cluster's own ledger as a section (JSON: ``FleetBook.to_json``)."""
    if fmt == "json":
        return json.dumps(fleet.to_json(), indent=2) + "\n"
    if fmt == "md":
        return fleet_markdown(fleet, title)
    if fmt == "html":
        return fleet_page(fleet, title)
    raise ValueError(f"format {fmt!r}: one of {', '.join(FORMATS)}")


_FLEET_HEAD = (
    "cluster", "slice", "wall", "goodput", "badput", "incidents", "chip-hours", "spot",
    "on-demand, same work", "spot saved",
)  # fmt: skip


def _slice(book: Book) -> str:
    p = book.ledger.pricing
    return f"{p.accelerator_type or '?'} ({p.chips} chips) in {p.region or '?'}"


def fleet_cells(f: Figures) -> list[str]:
    """A row's figures after its name and slice, as both documents write them."""
    return [
        dur(f.wall_s),
        "-" if f.goodput is None else f"{f.goodput:.1%}",
        dur(f.badput_total_s),
        str(f.incidents),
        f"{f.chip_hours:.2f}",
        _usd(f.spot_usd),
        _usd(f.on_demand_same_work_usd),
        _usd(f.spot_saved_usd),
    ]


def _range(fleet: FleetBook) -> str:
    if fleet.end <= fleet.start:
        return "no time recorded"
    return f"{utc(fleet.start)} to {utc(fleet.end)}"


def fleet_markdown(fleet: FleetBook, title: str) -> str:
    rows, total = fleet.rows, fleet.total
    lines = [f"# {title}", "", _range(fleet), "", f"**{total.headline()}**", "", "## Clusters", ""]
    lines += ["| " + " | ".join(_FLEET_HEAD) + " |", "|---|---|" + "---:|" * 8]
    for name, f in rows.items():
        lines.append(f"| {name} | {_slice(fleet.books[name])} | {' | '.join(fleet_cells(f))} |")
    cells = " | ".join(f"**{c}**" for c in fleet_cells(total))
    lines.append(f"| **total** | {len(rows)} clusters | {cells} |")
    lines += ["", "## Badput by cause", ""]
    lines += ["| cause | " + " | ".join(rows) + " | total |", "|---|" + "---:|" * (len(rows) + 1)]
    for cause in BADPUT:
        each = [dur(f.badput_s.get(cause, 0.0)) for f in rows.values()]
        lines.append(f"| {cause} | {' | '.join(each)} | {dur(total.badput_s[cause])} |")
    lines += ["", *[f"_{n}_" for n in fleet.notes]] if fleet.notes else []
    for name, book in fleet.books.items():
        lines += ["", f"## {name}", "", *_markdown_body(book, "###")]
    return "\n".join(lines) + "\n"


def fleet_page(fleet: FleetBook, title: str) -> str:
    """The fleet as one page: ``#fleet`` (a row per cluster, ``data-cluster``; the total's
    row ``data-total``), ``#fleet-badput``, then each cluster's ledger in
    ``<section id="cluster-NAME">``, its element ids ending in ``-NAME``."""
    rows, total = fleet.rows, fleet.total
    e = html.escape
    head = "".join(
        (f'<th class="n">{e(h)}</th>' if i > 1 else f"<th>{e(h)}</th>")
        for i, h in enumerate(_FLEET_HEAD)
    )
    parts = [
        *_head(title),
        f'<p class="muted">{e(_range(fleet))}</p>',
        f'<p class="headline" id="headline">{e(total.headline())}</p>',
        f'<h2>Clusters</h2><table id="fleet"><tr>{head}</tr>',
    ]

    def row(attrs: str, first: list[str], f: Figures, cell: str) -> str:
        data = (
            f' data-wall-s="{f.wall_s:.3f}" data-productive-s="{f.productive_s:.3f}"'
            f' data-chip-hours="{f.chip_hours}"'
            + ("" if f.spot_usd is None else f' data-spot-usd="{f.spot_usd:.2f}"')
        )
        inner = "".join(f"<{cell}>{e(x)}</{cell}>" for x in first) + "".join(
            f'<{cell} class="n">{e(x)}</{cell}>' for x in fleet_cells(f)
        )
        return f"<tr {attrs}{data}>{inner}</tr>"

    for name, f in rows.items():
        parts.append(row(f'data-cluster="{e(name)}"', [name, _slice(fleet.books[name])], f, "td"))
    parts.append(row("data-total", ["total", f"{len(rows)} clusters"], total, "th"))
    parts.append("</table>")
    names = "".join(f'<th class="n">{e(n)}</th>' for n in rows)
    parts.append(
        f'<h2>Badput by cause</h2><table id="fleet-badput"><tr><th>cause</th>{names}'
        '<th class="n">total</th></tr>'
    )
    for cause in BADPUT:
        cells = "".join(
            f'<td class="n" data-cluster="{e(n)}" data-seconds="{f.badput_s.get(cause, 0.0):.3f}">'
            f"{dur(f.badput_s.get(cause, 0.0))}</td>"
            for n, f in rows.items()
        )
        parts.append(
            f'<tr data-cause="{cause}"><td>{cause}</td>{cells}<th class="n" data-total '
            f'data-seconds="{total.badput_s[cause]:.3f}">{dur(total.badput_s[cause])}</th></tr>'
        )
    parts.append("</table>")
    parts += [f'<p class="muted">{e(n)}</p>' for n in fleet.notes]
    for name, book in fleet.books.items():
        parts.append(f'<section id="cluster-{e(name)}" data-cluster="{e(name)}">')
        parts.append(f"<h2>{e(name)}</h2>")
        parts += _page_body(book, f"-{name}", "h3")
        parts.append("</section>")
    parts.append("</body></html>")
    return "\n".join(parts) + "\n"


# -- Markdown --------------------------------------------------------------------------------------
def markdown(book: Book, title: str) -> str:
    return "\n".join([f"# {title}", "", *_markdown_body(book, "##")]) + "\n"


def _markdown_body(book: Book, h: str) -> list[str]:
    """One cluster's ledger under headings of level ``h`` (``"##"``: a document of its own;
    ``"###"``: a section of a fleet's)."""
    ledger = book.ledger
    c = ledger.cluster
    money = ledger.money
    p = ledger.pricing
    lines = [
        f"{utc(ledger.start)} to {utc(ledger.end)}",
        "",
        f"**{ledger.headline()}**",
        "",
        f"{h} Totals (the pod)",
        "",
        "| cause | time | share |",
        "|---|---:|---:|",
    ]
    for cause, value in c.seconds.items():
        share = value / c.wall_s if c.wall_s else 0.0
        lines.append(f"| {cause} | {dur(value)} | {share:.1%} |")
    lines.append(f"| **wall** | **{dur(c.wall_s)}** | 100% |")
    lines += ["", f"{h} Money", ""]
    lines += [
        f"- slice: {p.accelerator_type or '?'} ({p.chips} chips) in {p.region or '?'}",
        f"- chip-hours: {money['chip_hours']:.2f} (productive {money['productive_chip_hours']:.2f})",
        f"- spot cost: {_usd(money['spot_usd'])}",
        f"- on-demand for the same productive work: {_usd(money['on_demand_same_work_usd'])}",
        f"- {p.verdict(c.wall_s, c.productive_s)}",
        f"- prices: {p.rate.source if p.rate else p.why}",
    ]
    steps = sorted(c.recover_steps.items(), key=lambda kv: -kv[1])
    if steps:
        lines += ["", f"{h} Recovery by step", "", "| step | time |", "|---|---:|"]
        lines += [f"| {k} | {dur(v)} |" for k, v in steps]
    lines += ["", f"{h} Jobs", "", "| job | kind | wall | goodput | badput | redone steps |"]
    lines.append("|---|---|---:|---:|---:|---:|")
    for u in ledger.units:
        good = "-" if u.goodput is None else f"{u.goodput:.1%}"
        chain = " → ".join(u.members)
        lines.append(
            f"| {chain} | {u.kind} | {dur(u.wall_s)} | {good} | {dur(u.badput_s)} | "
            f"{u.redone_steps if u.steps_known else '-'} |"
        )
    incidents = ledger.incidents()
    if incidents:
        lines += ["", f"{h} Incidents", "", "| incident | lost at | detect | capacity | recover | "
                  "longest step |", "|---|---|---:|---:|---:|---|"]  # fmt: skip
        lines += [f"| {_incident_cells(i, ' | ')} |" for i in incidents]
    lines += ["", f"{h} Checkpoint interval", "", book.advice.render()]
    lines += ["", *[f"_{n}_" for n in ledger.notes]] if ledger.notes else []
    return lines


# -- HTML ------------------------------------------------------------------------------------------
_CSS = """
body{font:14px/1.45 system-ui,sans-serif;margin:2em auto;max-width:1000px;color:#222;padding:0 1em}
h1{font-size:1.5em;margin-bottom:.2em}h2{font-size:1.15em;margin-top:1.6em}
.headline{font-size:1.1em;font-weight:600;background:#f3f6f3;padding:.6em .8em;border-radius:6px}
table{border-collapse:collapse;margin:.5em 0}td,th{padding:.25em .7em;border-bottom:1px solid #ddd;
text-align:left}td.n,th.n{text-align:right;font-variant-numeric:tabular-nums}
.key span{display:inline-block;width:.9em;height:.9em;margin:0 .3em 0 1em;vertical-align:-.1em}
.muted{color:#777}svg text{font:12px system-ui,sans-serif;fill:#333}
"""


def _head(title: str) -> list[str]:
    e = html.escape
    return [
        "<!DOCTYPE html>",
        '<html lang="en"><head><meta charset="utf-8">',
        # No network: nothing may be fetched, even by accident.
        '<meta http-equiv="Content-Security-Policy" content="default-src \'none\'; '
        "style-src 'unsafe-inline'\">",
        f"<title>{e(title)}</title><style>{_CSS}</style></head><body>",
        f"<h1>{e(title)}</h1>",
    ]


def page(book: Book, title: str) -> str:
    return "\n".join([*_head(title), *_page_body(book), "</body></html>"]) + "\n"


def _page_body(book: Book, sfx: str = "", h: str = "h2") -> list[str]:
    """One cluster's ledger: its element ids end in ``sfx`` (a fleet's page holds several),
    its headings are ``h``."""
    ledger = book.ledger
    c = ledger.cluster
    e = html.escape
    parts = [
        f'<p class="muted">{e(utc(ledger.start))} to {e(utc(ledger.end))}</p>',
        f'<p class="headline" id="headline{sfx}">{e(ledger.headline())}</p>',
        f"<{h}>Timeline</{h}>",
        _legend(),
        timeline_svg(book, sfx),
        f"<{h}>Totals (the pod)</{h}>",
        _totals_table(book, sfx),
        f"<{h}>Badput by cause</{h}>",
        badput_svg(book, sfx),
        f"<{h}>Money</{h}>",
        money_svg(book, sfx),
        _money_table(book, sfx),
    ]
    steps = sorted(c.recover_steps.items(), key=lambda kv: -kv[1])
    if steps:
        parts.append(
            f'<{h}>Recovery by step</{h}><table id="recover-steps{sfx}"><tr><th>step</th>'
            '<th class="n">time</th></tr>'
        )
        parts += [
            f'<tr><td>{e(k)}</td><td class="n" data-seconds="{v:.3f}">{dur(v)}</td></tr>'
            for k, v in steps
        ]
        parts.append("</table>")
    parts.append(_jobs_table(book, sfx, h))
    incidents = ledger.incidents()
    if incidents:
        parts.append(
            f'<{h}>Incidents</{h}><table id="incidents{sfx}"><tr><th>incident</th><th>lost at</th>'
            '<th class="n">detect</th><th class="n">capacity</th><th class="n">recover</th>'
            "<th>longest step</th></tr>"
        )
        parts += [
            f'<tr data-incident="{e(i["incident"])}"><td>'
            + "</td><td>".join(e(x) for x in _incident_cells(i, None))
            + "</td></tr>"
            for i in incidents
        ]
        parts.append("</table>")
    parts.append(f'<{h}>Checkpoint interval</{h}><p id="advice{sfx}">{e(book.advice.render())}</p>')
    for note in ledger.notes:
        parts.append(f'<p class="muted">{e(note)}</p>')
    return parts


def _legend() -> str:
    items = "".join(
        f'<span style="background:{COLOURS[c]}"></span>{html.escape(str(c))}' for c in Cause
    )
    return f'<p class="key">{items}</p>'


def timeline_svg(book: Book, sfx: str = "") -> str:
    """One row per unit on one time axis; each segment a rect with its cause and a tooltip."""
    ledger = book.ledger
    units = [ledger.cluster, *ledger.units]
    label_w, bar_w, row_h, top = 150, 800, 22, 18
    height = top + row_h * len(units) + 22
    span = ledger.end - ledger.start
    out = [
        f'<svg id="timeline{sfx}" xmlns="http://www.w3.org/2000/svg" width="{label_w + bar_w + 10}" '
        f'height="{height}" data-units="{len(units)}" role="img" aria-label="timeline">'
    ]
    for row, unit in enumerate(units):
        y = top + row * row_h
        name = "pod" if unit.kind == "cluster" else unit.name
        out.append(f'<text x="0" y="{y + 14}">{html.escape(name[:22])}</text>')
        if span <= 0:
            continue
        for s in unit.segments:
            x = label_w + (s.start - ledger.start) / span * bar_w
            w = max(0.5, s.seconds / span * bar_w)
            tip = f"{name}: {s.cause}{' ' + s.detail if s.detail else ''} {dur(s.seconds)}"
            out.append(
                f'<rect class="seg {s.cause}" x="{x:.2f}" y="{y}" width="{w:.2f}" '
                f'height="{row_h - 6}" fill="{COLOURS[s.cause]}" data-unit="{html.escape(name)}" '
                f'data-cause="{s.cause}" data-seconds="{s.seconds:.3f}">'
                f"<title>{html.escape(tip)}</title></rect>"
            )
    axis_y = top + row_h * len(units) + 14
    out.append(f'<text x="{label_w}" y="{axis_y}">{html.escape(utc(ledger.start))}</text>')
    out.append(
        f'<text x="{label_w + bar_w}" y="{axis_y}" text-anchor="end">'
        f"{html.escape(utc(ledger.end))}</text>"
    )
    out.append("</svg>")
    return "".join(out)


def badput_svg(book: Book, sfx: str = "") -> str:
    """Horizontal bars: seconds lost to each cause (the pod), longest first."""
    c = book.ledger.cluster
    rows = sorted(((v, k) for k, v in c.seconds.items() if k in BADPUT and v > 0), reverse=True)
    most = rows[0][0] if rows else 1.0
    label_w, bar_w, row_h = 110, 600, 22
    out = [
        f'<svg id="badput{sfx}" xmlns="http://www.w3.org/2000/svg" width="{label_w + bar_w + 120}" '
        f'height="{max(1, len(rows)) * row_h + 4}" data-bars="{len(rows)}" role="img" '
        'aria-label="badput by cause">'
    ]
    if not rows:
        out.append('<text x="0" y="16">no badput</text>')
    for i, (value, cause) in enumerate(rows):
        y = i * row_h
        w = max(0.5, value / most * bar_w)
        out.append(f'<text x="0" y="{y + 15}">{cause}</text>')
        out.append(
            f'<rect class="bar {cause}" x="{label_w}" y="{y + 3}" width="{w:.2f}" '
            f'height="{row_h - 6}" fill="{COLOURS[cause]}" data-seconds="{value:.3f}"/>'
        )
        out.append(f'<text x="{label_w + w + 6:.2f}" y="{y + 15}">{dur(value)}</text>')
    out.append("</svg>")
    return "".join(out)


def money_svg(book: Book, sfx: str = "") -> str:
    """Two bars: what the pod cost on spot, and the productive part at on-demand prices."""
    money = book.ledger.money
    spot, od = money["spot_usd"], money["on_demand_same_work_usd"]
    if spot is None or od is None:
        return (
            f'<svg id="money{sfx}" xmlns="http://www.w3.org/2000/svg" width="600" height="24" '
            'data-bars="0"><text x="0" y="16">no price (see below)</text></svg>'
        )
    most = max(spot, od, 0.01)
    label_w, bar_w = 230, 450
    bars = [("spot (whole pod time)", spot, "#2e7dd1", "spot"),
            ("on-demand, same productive work", od, "#888888", "on-demand")]  # fmt: skip
    out = [
        f'<svg id="money{sfx}" xmlns="http://www.w3.org/2000/svg" width="{label_w + bar_w + 120}" '
        'height="48" data-bars="2" role="img" aria-label="spot against on-demand">'
    ]
    for i, (label, value, colour, cls) in enumerate(bars):
        y = i * 24
        w = max(0.5, value / most * bar_w)
        out.append(f'<text x="0" y="{y + 15}">{label}</text>')
        out.append(
            f'<rect class="bar {cls}" x="{label_w}" y="{y + 3}" width="{w:.2f}" height="18" '
            f'fill="{colour}" data-usd="{value:.2f}"/>'
        )
        out.append(f'<text x="{label_w + w + 6:.2f}" y="{y + 15}">{_usd(value)}</text>')
    out.append("</svg>")
    return "".join(out)


def _totals_table(book: Book, sfx: str = "") -> str:
    c = book.ledger.cluster
    rows = [
        f'<table id="totals{sfx}"><tr><th>cause</th><th class="n">time</th><th class="n">share</th></tr>'
    ]
    for cause, value in c.seconds.items():
        share = value / c.wall_s if c.wall_s else 0.0
        rows.append(
            f'<tr data-cause="{cause}"><td>{cause}</td><td class="n" data-seconds="{value:.3f}">'
            f'{dur(value)}</td><td class="n">{share:.1%}</td></tr>'
        )
    rows.append(
        f'<tr data-cause="wall"><th>wall</th><th class="n" data-seconds="{c.wall_s:.3f}">'
        f'{dur(c.wall_s)}</th><th class="n">100%</th></tr></table>'
    )
    return "".join(rows)


def _incident_cells(i: dict[str, Any], sep: str | None) -> Any:
    steps = sorted(i["recover_steps"].items(), key=lambda kv: -kv[1])
    longest = f"{steps[0][0]} {dur(steps[0][1])}" if steps else "-"
    cells = [
        i["incident"],
        utc(i["lost_at"]),
        dur(i["detect_s"]),
        dur(i["capacity_s"]),
        dur(i["recover_s"]),
        longest,
    ]
    return cells if sep is None else sep.join(cells)


def _money_table(book: Book, sfx: str = "") -> str:
    ledger = book.ledger
    m = ledger.money
    p = ledger.pricing
    c = ledger.cluster
    e = html.escape
    rows = [
        ("slice", f"{p.accelerator_type or '?'} ({p.chips} chips) in {p.region or '?'}"),
        ("chip-hours", f"{m['chip_hours']:.2f} (productive {m['productive_chip_hours']:.2f})"),
        ("spot cost", _usd(m["spot_usd"])),
        ("on-demand, same productive work", _usd(m["on_demand_same_work_usd"])),
        ("verdict", p.verdict(c.wall_s, c.productive_s)),
        ("prices", p.rate.source if p.rate else p.why),
    ]
    body = "".join(f"<tr><td>{e(k)}</td><td>{e(v)}</td></tr>" for k, v in rows)
    return f'<table id="money-table{sfx}">{body}</table>'


def _jobs_table(book: Book, sfx: str = "", h: str = "h2") -> str:
    e = html.escape
    rows = [
        f'<{h}>Jobs</{h}><table id="jobs{sfx}"><tr><th>job</th><th>kind</th><th class="n">wall</th>'
        '<th class="n">goodput</th><th class="n">badput</th><th class="n">redone steps</th></tr>'
    ]
    for u in book.ledger.units:
        rows.append(_job_row(u, e))
    rows.append("</table>")
    return "".join(rows)


def _job_row(u: Unit, e: Any) -> str:
    good = "-" if u.goodput is None else f"{u.goodput:.1%}"
    redone = str(u.redone_steps) if u.steps_known else "-"
    return (
        f'<tr data-job="{e(u.name)}"><td>{e(" → ".join(u.members))}</td><td>{e(u.kind)}</td>'
        f'<td class="n">{dur(u.wall_s)}</td><td class="n">{good}</td>'
        f'<td class="n">{dur(u.badput_s)}</td><td class="n">{redone}</td></tr>'
    )
