"""deploy/: the Dockerfile, the systemd unit, the Grafana dashboard and the alert rules are
checked against the product they deploy: the unit by `systemd-analyze verify`, the rules by
`promtool`, every command line by phantom's own parser, the HEALTHCHECK's command against a
live /healthz, every series a dashboard or rule names against what the exporter serves."""

from __future__ import annotations

import asyncio
import json
import re
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from console.cli import build_parser
from console.config.listen import Listen
from console.services.exporter.series import WatchSeries
from console.services.exporter.server import Exporter, MetricsServer
from console.services.model import PodSnapshot
from tests.support import REPO

DEPLOY = REPO / "deploy"
DOCKERFILE = (DEPLOY / "Dockerfile").read_text()
UNIT = DEPLOY / "systemd" / "phantom-watch.service"
RULES = DEPLOY / "prometheus" / "phantom-alerts.yml"
DASHBOARD = DEPLOY / "grafana" / "phantom-watch.json"
SERIES = re.compile(r"\bphantom_[a-z_]+\b")
SUFFIXES = ("_bucket", "_count", "_sum")


def _served() -> set[str]:
    """Every sample name the exporter serves (histograms with their suffixes)."""
    series = WatchSeries(zone="z", hosts_total=4, alive_within_s=30.0)
    text = series.render().decode()
    names = set(re.findall(r"^# TYPE (\S+) (\S+)", text, re.M))
    out = set()
    for name, kind in names:
        if kind == "histogram":
            out |= {name + s for s in SUFFIXES}
        elif kind == "counter":
            out.add(name if name.endswith("_total") else name + "_total")
        else:
            out.add(name)
    return out


def _docker(instruction: str) -> list[str]:
    return re.findall(rf"^{instruction}\s+(.+?)(?<!\\)$", DOCKERFILE, re.M | re.S)


def test_the_image_runs_watch_as_a_user_with_config_and_state_mounted() -> None:
    users = _docker("USER")
    assert users and users[-1] not in ("root", "0")
    assert DOCKERFILE.index("USER ") < DOCKERFILE.index("ENTRYPOINT")
    assert "XDG_CONFIG_HOME=/config" in DOCKERFILE and "XDG_STATE_HOME=/state" in DOCKERFILE
    (volume,) = _docker("VOLUME")
    assert json.loads(volume) == ["/state"]
    entry = json.loads(_docker("ENTRYPOINT")[0])
    cmd = json.loads(_docker("CMD")[-1])
    argv = entry[entry.index("phantom") + 1 :] + cmd
    args = build_parser().parse_args(argv)
    assert args.command == "watch" and args.config == "/config/config.toml"
    assert args.metrics == Listen("0.0.0.0", 9464)
    assert "EXPOSE 9464" in DOCKERFILE


async def test_the_healthcheck_command_asks_healthz() -> None:
    """The HEALTHCHECK's own command, pointed at a live exporter: 0 while the poll loop
    publishes, not 0 before it has."""
    line = next(x for x in DOCKERFILE.splitlines() if x.strip().startswith('CMD ["python"'))
    argv = json.loads(line.strip().removeprefix("CMD "))
    series = WatchSeries(zone="z", hosts_total=4, alive_within_s=30.0)
    exporter = Exporter(series, MetricsServer(series, Listen("127.0.0.1", 0)))
    await exporter.start()
    code = argv[-1].replace("9464", str(exporter.server.port))

    async def check() -> int:
        proc = await asyncio.create_subprocess_exec(sys.executable, "-c", code)
        return await asyncio.wait_for(proc.wait(), 30)

    try:
        assert await check() != 0  # no poll yet: 503
        series.offer(PodSnapshot(at=0.0, provider="local", node_name="p"))
        assert await check() == 0
    finally:
        await exporter.stop()


def test_the_unit_starts_watch_on_loopback_and_keeps_exit_2_down() -> None:
    text = UNIT.read_text()
    (exec_start,) = re.findall(r"^ExecStart=(.+)$", text, re.M)
    args = build_parser().parse_args(shlex.split(exec_start)[1:])
    assert args.command == "watch" and args.metrics.loopback
    assert "RestartPreventExitStatus=2" in text and "KillSignal=SIGTERM" in text
    assert re.search(r"^User=(?!root)\w+", text, re.M)


@pytest.mark.skipif(
    shutil.which("systemd-analyze") is None, reason="systemd-analyze is not installed"
)
def test_systemd_analyze_verifies_the_unit(tmp_path: Path) -> None:
    phantom = Path(sys.executable).parent / "phantom"
    if not phantom.exists():
        pytest.skip("the phantom entry point is not installed in this environment")
    unit = tmp_path / UNIT.name
    unit.write_text(UNIT.read_text().replace("/usr/local/bin/phantom", str(phantom)))
    proc = subprocess.run(
        ["systemd-analyze", "verify", str(unit)], capture_output=True, text=True, timeout=60
    )
    out = proc.stdout + proc.stderr
    assert proc.returncode == 0, out
    assert UNIT.name not in out, out


@pytest.mark.skipif(
    shutil.which("promtool") is None,
    reason="promtool is not installed (Debian's prometheus package has it; .ci/run installs it)",
)
def test_promtool_checks_the_alert_rules() -> None:
    proc = subprocess.run(
        ["promtool", "check", "rules", str(RULES)], capture_output=True, text=True, timeout=60
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "SUCCESS: 6 rules found" in proc.stdout


def test_rules_and_dashboard_name_only_served_series_and_show_them_all() -> None:
    served = _served()
    rules = set(SERIES.findall(RULES.read_text()))
    assert rules and rules <= served, rules - served
    dash = json.loads(DASHBOARD.read_text())
    exprs = [t["expr"] for p in dash["panels"] for t in p["targets"]]
    used = {name for e in exprs for name in SERIES.findall(e)}
    assert used <= served, used - served
    bases = {n.removesuffix(s) for n in used for s in (*SUFFIXES, "_total") if n.endswith(s)}
    shown = used | bases
    listed = {n.removesuffix("_total") for n in served if not n.endswith(SUFFIXES)}
    listed |= {n.removesuffix(s) for n in served for s in SUFFIXES if n.endswith(s)}
    assert {n.removesuffix("_total") for n in shown} >= listed, listed - shown
    ids = [p["id"] for p in dash["panels"]]
    assert dash["uid"] == "phantom-watch" and len(set(ids)) == len(ids)
