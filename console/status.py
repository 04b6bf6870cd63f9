"""`phantom status [--json]`: one snapshot of pod, Ray, jobs and cadence, then exit.

Over a fleet with no ``--cluster``: every cluster's snapshot, taken side by side, one JSON
object (or table) per cluster, each naming its cluster, then the fleet's ledger, each
cluster's and their total (``status_fleet_main``).

For `watch`, cron and monitoring. ``--json`` prints one JSON object (the same shape the
script runner's ``status`` step returns as its result); without it a plain-text table.
Exit 0 with a snapshot; 1 when the cluster cannot be reached (the reason on stderr);
2 for a bad config. Nothing here starts the watchdog: a status query never acts. Output
goes through the one ``console.secrets.Scrubber``.
"""

from __future__ import annotations

import asyncio
import json
import sys
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, TextIO

from console import exit_codes
from console.commands.status import collect_status, reason_line, status_and_book
from console.config import Config, ConfigError
from console.secrets import Scrubber
from console.services.recovery.diagnosis import job_env_text

if TYPE_CHECKING:
    from console.config.fleet import Fleet
    from console.services.api import ConsoleServices
    from console.services.ledger.book import Book

ServicesFactory = Callable[[Config], "ConsoleServices"]

__all__ = ["collect_status", "render_table", "status_fleet_main", "status_main"]


def _fmt_s(value: Any) -> str:
    if value is None:
        return "-"
    return f"{float(value):.1f}s"


def _table(headers: list[str], rows: list[list[str]]) -> list[str]:
    widths = [
        max(len(h), *(len(r[i]) for r in rows)) if rows else len(h) for i, h in enumerate(headers)
    ]
    fmt = "  ".join(f"{{:<{w}}}" for w in widths)
    return [fmt.format(*headers).rstrip()] + [fmt.format(*r).rstrip() for r in rows]


def render_table(status: Mapping[str, Any]) -> str:
    """Human-readable status (fits 80 columns for a 4-host pod)."""
    pod = status["pod"]
    lines = [
        f"pod {pod['node_name']} ({pod['provider']}, {pod.get('accelerator_type') or '?'}"
        f"{', ' + pod['zone'] if pod.get('zone') else ''})  "
        f"state {pod['tpu_state']}  health {pod.get('health') or '-'}  "
        f"ready {pod['ready_hosts']}/{len(pod['hosts'])}",
        f"ray {status['ray']['alive_nodes']}/{status['ray']['hosts']} alive  "
        f"tunnel {'up ' + pod['dashboard_url'] if pod['tunnel_up'] else 'down'}",
        "",
    ]
    hosts = [
        [
            h["name"],
            h["ip"],
            str(h["tpu_state"]),
            h["ray_state"] + (f" x{h['ray_nodes']}" if h["ray_nodes"] > 1 else ""),
            str(h["ssh"]),
        ]
        for h in pod["hosts"]
    ]
    lines += _table(["HOST", "IP", "TPU", "RAY", "SSH"], hosts)
    lines.append("")
    workloads = pod.get("workloads") or []
    if workloads:  # GKE: the JobSets, as `kubectl get jobset` shows them
        rows = [
            [
                _clip(w["name"], 28),
                str(w["status"]),
                w.get("terminal_state") or "-",
                str(w.get("restarts", 0)),
                f"{w.get('pods_running', 0)}/{w.get('pods_total', 0)}",
            ]
            for w in workloads
        ]
        lines += _table(["WORKLOAD", "STATUS", "TERMINALSTATE", "RESTARTS", "RUNNING"], rows)
        lines.append("")
    jobs = [[j["job_id"], j["status"], _clip(j.get("entrypoint", ""), 50)] for j in status["jobs"]]
    lines += _table(["JOB", "STATUS", "ENTRYPOINT"], jobs) if jobs else ["no jobs"]
    for j in status["jobs"]:
        if j.get("env_problems"):
            lines.append(job_env_text(j["job_id"], j["env_problems"]))
    if status.get("jobs_error"):
        lines.append(f"jobs: {status['jobs_error']}")
    if status["cadence"]:
        lines.append("")
        rows = [
            [
                _clip(c["name"] or c["run_id"], 24),
                "-" if c["last_step"] is None else str(c["last_step"]),
                _fmt_s(c["seconds_since"]),
                _fmt_s(c["median_interval_s"]),
                c["verdict"] if c["verdict"] == "ok" else c["verdict"].upper(),
            ]
            for c in status["cadence"]
        ]
        lines += _table(["RUN", "STEP", "SINCE", "MEDIAN", "CADENCE"], rows)
        lines += [
            f"stale {c['name'] or c['run_id']}: {c['stale']}"
            for c in status["cadence"]
            if c["stale"]
        ]
    rec = status["recovery"]
    lines.append("")
    if rec["active"]:
        running = [s["name"] for s in rec["steps"] if s["state"] == "running"]
        lines.append(f"recovery: running ({', '.join(running) or 'starting'})")
    elif rec["outcome"]:
        lines.append(f"recovery: last {rec['result']}, mttr {_fmt_s(rec['mttr_s'])}")
    else:
        lines.append(f"recovery: idle (auto {'on' if rec['auto'] else 'off'})")
    for inc in status.get("incidents", [])[-1:]:
        lines.append(_clip(f"incident {inc['incident']}: {inc['message']}", 80))
    if status.get("ledger", {}).get("headline"):
        lines.append(_clip(f"ledger: {status['ledger']['headline']}", 80))
    for w in pod.get("warnings", []):
        lines.append(f"warning: {w}")
    return "\n".join(lines)


def _clip(s: str, n: int) -> str:
    return s if len(s) <= n else s[: n - 1] + "…"


def status_main(
    config: Config,
    *,
    as_json: bool,
    services_factory: ServicesFactory | None = None,
    stdout: TextIO | None = None,
    stderr: TextIO | None = None,
) -> int:
    """One snapshot, then exit. With ``--json`` stdout always carries exactly one JSON
    object (``"ok": false`` and ``"error"`` when there is no snapshot), so a monitoring job
    that parses stdout never gets an empty string; the exit code says the same. A fleet's
    cluster (`--cluster NAME`) says its name first (``"cluster"``)."""
    out = sys.stdout if stdout is None else stdout
    err = sys.stderr if stderr is None else stderr
    (result,) = asyncio.run(_gather([config], services_factory))
    return _print(result, as_json, out, err)


def status_fleet_main(
    fleet: Fleet,
    *,
    as_json: bool,
    services_factory: ServicesFactory | None = None,
    stdout: TextIO | None = None,
    stderr: TextIO | None = None,
) -> int:
    """Every cluster of ``fleet`` at once (each its own services, side by side: a slow one
    holds up none of the others' snapshots), in the fleet's order: with ``--json`` one
    object per cluster, one a line, each naming its ``"cluster"``; else a table each under
    its name. The exit code is the worst of theirs."""
    out = sys.stdout if stdout is None else stdout
    err = sys.stderr if stderr is None else stderr
    results = asyncio.run(_gather(fleet.members, services_factory))
    codes = []
    for index, result in enumerate(results):
        if not as_json:
            out.write(("\n" if index else "") + f"== cluster {result.config.name} ==\n")
        codes.append(_print(result, as_json, out, err))
    if len(results) > 1:
        _print_fleet_ledger(results, as_json, out)
    return max(codes)


def _print_fleet_ledger(results: Sequence[_Result], as_json: bool, out: TextIO) -> None:
    """The fleet's ledger after its clusters' snapshots, as `phantom report` and the Ledger
    screen total it (``ledger.fleet.FleetBook``, from the books the snapshots read): with
    ``--json`` one more object, ``{"type": "fleet", "ledger": {"clusters": {...}, "total":
    {...}, ...}}``; else a row per cluster, the total and its headline."""
    from console.services.ledger.fleet import FleetBook, unread
    from console.services.ledger.render import fleet_cells

    fleet = FleetBook(
        {r.config.name: r.book for r in results if r.book is not None},
        tuple(unread(r.config.name, r.unread) for r in results if r.book is None),
    )
    scrub = Scrubber([results[0].config.wandb.api_key_env])  # [wandb] is the fleet's
    if as_json:
        out.write(json.dumps(scrub.data({"type": "fleet", "ledger": fleet.to_json()})) + "\n")
        out.flush()
        return
    picked = (0, 1, 2, 3, 7)  # wall, goodput, badput, incidents, spot saved

    def cells(name: str, figures: list[str]) -> list[str]:
        return [name, *(figures[i] for i in picked)]

    rows = [cells(n, fleet_cells(f)) for n, f in fleet.rows.items()]
    rows.append(cells("total", fleet_cells(fleet.total)))
    head = ["CLUSTER", "WALL", "GOODPUT", "BADPUT", "INCIDENTS", "SPOT SAVED"]
    lines = ["", "== the fleet's ledger ==", *_table(head, rows)]
    lines.append(_clip(f"ledger: {fleet.total.headline()}", 80))
    lines += [_clip(f"note: {n}", 80) for n in fleet.notes]
    out.write(scrub.text("\n".join(lines)) + "\n")
    out.flush()


@dataclass(frozen=True)
class _Result:
    """One cluster's snapshot (``status``), or why there is none (``code``, ``error``)."""

    config: Config
    status: dict[str, Any] | None = None
    code: int = exit_codes.OK
    error: str = ""
    book: Book | None = None
    """The ledger its ``"ledger"`` is, for the fleet's total (None: not read)."""
    unread: str = ""
    """Why there is no ``book``."""


async def _gather(configs: Sequence[Config], factory: ServicesFactory | None) -> list[_Result]:
    if factory is None:
        from console.wiring import services_factory as real

        factory = real()
    made = factory
    return list(await asyncio.gather(*(_one(made, c) for c in configs)))


async def _one(factory: ServicesFactory, config: Config) -> _Result:
    try:
        status, book = await _collect(factory, config)
    except ConfigError as exc:
        return _Result(config, code=exit_codes.USAGE, error=exc.render(), unread="a bad config")
    except Exception as exc:  # anything that stops us reaching the cluster is "unreachable"
        reason = reason_line(exc)
        return _Result(
            config,
            unread=reason,
            code=exit_codes.FAILED,
            error=f"phantom status: cannot reach the {config.cluster.provider} cluster "
            f"{_name(config)!r}: {reason}{_pod_hint(config, reason)}",
        )
    unread = "" if book is not None else str(status["ledger"].get("error", ""))
    return _Result(config, status, book=book, unread=unread)


def _print(result: _Result, as_json: bool, out: TextIO, err: TextIO) -> int:
    config = result.config
    scrub = Scrubber([config.wandb.api_key_env])
    named = {"cluster": config.name} if config.state_dir else {}
    status = result.status
    if status is None:
        print(scrub.text(result.error), file=err)
        if as_json:
            problem = {"type": "status", "ok": False, "reachable": False}
            problem |= {"exit_code": result.code, "error": scrub.text(result.error)}
            out.write(json.dumps({**named, **problem}) + "\n")
            out.flush()
        return result.code
    clean = scrub.data({**named, "ok": bool(status["reachable"]), **status})
    if as_json:
        out.write(json.dumps(clean, sort_keys=False) + "\n")
    else:
        out.write(render_table(clean) + "\n")
    out.flush()
    if not status["reachable"]:
        reason = status["unreachable_reason"]
        print(
            scrub.text(
                f"phantom status: cluster {_name(config)!r} unreachable: "
                f"{reason}{_pod_hint(config, reason)}"
            ),
            file=err,
        )
        return exit_codes.FAILED
    return exit_codes.OK


def _name(config: Config) -> str:
    """What the cluster is called: its fleet name (a fleet's clusters may share a node name:
    each said 'phantom-pod'), a [cluster] config's from its node."""
    from console.config.fleet import default_name

    return config.name or default_name(config)


def _pod_hint(config: Config, reason: str) -> str:
    if config.is_gke and config.is_emulated and "gke up" not in reason:
        return " (is the GKE emulator up? `phantom gke up`)"
    if not config.is_local or "pod up" in reason:
        return ""
    return " (is the pod up? `phantom pod up`)"


async def _collect(factory: ServicesFactory, config: Config) -> tuple[dict[str, Any], Book | None]:
    services = factory(config)
    try:
        return await status_and_book(services)
    finally:
        await services.stop()
