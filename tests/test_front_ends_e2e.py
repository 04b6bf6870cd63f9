"""The normal way to use the tool: the console open in tmux, a script in another pane and
`phantom status --json` under `watch`, all on one emulated pod, and a preemption meanwhile.

No fakes: the TUI runs in this process on the real services (it takes the pod's watch
lease first); the script and the status queries are real `phantom` processes sharing its
state dir (journal, registry, leases). Exactly one recovery is journaled, both front ends
show it, and the script's submit works although the TUI holds the tunnel's local ports.
"""

from __future__ import annotations

import asyncio
import json
import time
from pathlib import Path

import pytest

from benchmarks.pods import pod_config
from console.commands.bring_up import COMMAND as BRING_UP
from console.commands.kit.params import NoArgs
from console.commands.teardown import COMMAND as TEARDOWN
from console.config import Config
from console.services.record.journal import Journal
from console.tui.app import PhantomApp, TuiSettings
from console.widgets.fast_table import FastTable
from console.wiring import make_services
from emulators.tpu_pod import client as pod_client
from emulators.tpu_pod.client import PodInfo
from tests.script.test_e2e import child_env, phantom_argv
from tests.support.waiting import until

SCRIPT = """\
submit single --train-args "--algo ppo --total-timesteps 400000 --device cpu"
wait-job last RUNNING --timeout 5m
wait-event recovered --timeout 8m
status
finally
stop-job last --continue
"""


def _toml(pod: PodInfo, tmp_path: Path) -> tuple[Path, Config]:
    config = pod_config(
        pod, tmp_path, recovery={"poll_interval_s": 1.0, "auto": True}, source="<front ends>"
    )
    ray = config.ray
    path = tmp_path / "phantom.toml"
    path.write_text(
        f"""
[cluster]
provider = "local"
hosts = {len(pod.hosts)}
run_dir = "{pod.run_dir}"

[ssh]
connect_timeout_s = 5.0
retries = 1
command_timeout_s = 240.0

[ray]
gcs_port = {ray.gcs_port}
dashboard_port = {ray.dashboard_port}
client_port = {ray.client_port}
local_dashboard_port = {ray.local_dashboard_port}
local_client_port = {ray.local_client_port}
num_cpus = 1
object_store_mb = 100

[wandb]
mode = "offline"
dir = "{tmp_path / "wandb"}"

[recovery]
poll_interval_s = 1.0
ready_timeout_s = 120.0
"""
    )
    return path, config


@pytest.mark.slow
@pytest.mark.e2e
@pytest.mark.timeout(1500)
async def test_tui_script_and_status_share_one_pod_through_a_preemption(
    pod: PodInfo, tmp_path: Path
) -> None:
    cfg_path, config = _toml(pod, tmp_path)
    env = child_env(tmp_path)
    state = Path(env["XDG_STATE_HOME"]) / "phantom"  # the product's own default for the children
    services = make_services(config, state_dir=state, autostart_pod=False)
    app = PhantomApp(services, clock=time.time, settings=TuiSettings(cursor_blink=False))
    script: asyncio.subprocess.Process | None = None
    try:
        async with app.run_test(size=(120, 40)) as pilot:
            await until(
                lambda: app.state.pod is not None and app.state.pod.ready_hosts == 4, 120, "READY"
            )
            await app.start_command(BRING_UP, NoArgs()).wait()
            await until(lambda: bool(app.state.pod and app.state.pod.ray_alive == 4), 240, "Ray")
            assert services.sharing.owner  # the console in tmux watches the pod
            await pilot.pause()
            table = app.screen.query_one("#hosts", FastTable)
            rows = [table.cell_texts(k) for k in table.row_keys]
            assert len(rows) == 4
            assert all(r[2] == "READY" and r[4].startswith("ALIVE") for r in rows), rows

            (tmp_path / "drill.phantom").write_text(SCRIPT)
            # Real processes, awaited without blocking this loop: the TUI's services run on
            # it and must keep polling (that is what detects the preemption).
            script = await asyncio.create_subprocess_exec(
                *phantom_argv(
                    "--config", str(cfg_path), "--script", str(tmp_path / "drill.phantom")
                ),
                env=env,
                stdout=asyncio.subprocess.PIPE,
                stderr=asyncio.subprocess.PIPE,
            )
            assert script.stdout is not None and script.stderr is not None
            out: list[dict[str, object]] = []
            while True:  # until the script's job runs
                line = await asyncio.wait_for(script.stdout.readline(), 600)
                assert line, (await script.stderr.read()).decode()[-3000:]
                out.append(json.loads(line))
                if out[-1].get("type") == "step" and out[-1].get("action") == "wait-job":
                    assert out[-1]["ok"], out[-1]
                    break
            await pod_client.async_preempt(pod.run_dir, 2)  # a spot reclaim of one worker

            watched = await asyncio.create_subprocess_exec(  # `watch phantom status --json`
                *phantom_argv("--config", str(cfg_path), "status", "--json"),
                env=env,
                stdout=asyncio.subprocess.PIPE,
                stderr=asyncio.subprocess.PIPE,
            )
            w_out, w_err = await asyncio.wait_for(watched.communicate(), 180)
            snapshot = json.loads(w_out)
            assert snapshot["type"] == "status" and "recovery" in snapshot, w_err.decode()

            rest, err = await asyncio.wait_for(script.communicate(), 900)
            out += [json.loads(line) for line in rest.decode().splitlines()]
            assert script.returncode == 0, err.decode()[-3000:]
            assert any(x.get("kind") == "recovered" for x in out)  # the script saw it
            submit = next(x for x in out if x.get("action") == "submit")
            assert submit["ok"]  # although the TUI holds the tunnel's configured ports
            await until(lambda: any(e.kind == "recovered" for e in app.state.events), 60, "TUI")
            await app.start_command(TEARDOWN, NoArgs()).wait()
            await app._stop_services()
    finally:
        if script is not None and script.returncode is None:
            script.kill()
            await script.wait()
        await services.stop()
        services.close_journal()
    kinds = [e.kind for e in Journal(state / "journal.sqlite").query(limit=100_000)]
    assert kinds.count("recovery_started") == 1 and kinds.count("recovered") == 1, kinds
    assert kinds.count("preempted") == 1
