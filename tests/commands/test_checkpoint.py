"""``checkpoint [JOB|all]``, from every front end: a script line, an agent's tool call, a key
of the user's keymap on the Jobs screen; refused, saying why, on a cluster whose trainers
cannot be asked (a real GKE cluster). And for real: a trainer (``engine.train`` under Ray on
the pod emulator) asked through an agent's call writes a checkpoint at the step it reached,
which is in storage, and goes on training; the result is in the journal.
"""

from __future__ import annotations

import io
import json
import re
from pathlib import Path
from typing import Any

import pytest

from benchmarks.pods import pod_config
from console.commands import Front, by_name
from console.config import Config, parse_config
from console.mcp.calls import Calls
from console.mcp.policy import Policy
from console.screens.confirm import ConfirmScreen
from console.screens.palette import PhantomCommands
from console.script.main import script_main
from console.secrets import Scrubber
from console.services.jobs.spec import SubmitSpec
from console.services.model import Reason
from console.tui.app import PhantomApp, TuiSettings
from console.wiring import make_services
from emulators.tpu_pod.client import PodInfo
from engine.contract import ASKED_LINE_RE
from engine.storage import MANIFEST
from tests.support.fake_data import T0
from tests.support.fake_services import FakeServices
from tests.support.script_harness import Harness
from tests.support.tui import settle, wait_for
from tests.support.waiting import until

COMMAND = by_name("checkpoint")


def _script(tmp_path: Path, text: str, config: Config | None = None) -> tuple[int, list[Any], str]:
    h = Harness()
    (tmp_path / "s.phantom").write_text(text)
    out, err = io.StringIO(), io.StringIO()
    code = script_main(
        str(tmp_path / "s.phantom"),
        config or Config(),
        services_factory=h.factory,
        pod_control=h.pod(),
        stdout=out,
        stderr=err,
    )
    return code, [json.loads(line) for line in out.getvalue().splitlines()], err.getvalue()


def test_it_is_one_module_offered_everywhere_it_can_run() -> None:
    assert COMMAND is not None and COMMAND.fronts == {Front.TUI, Front.SCRIPT, Front.MCP}
    assert [a.name for a in COMMAND.params] == ["job", "--timeout"]
    assert COMMAND.input_schema()["properties"]["job"]["type"] == "string"


def test_a_script_asks_the_job_it_submitted_and_every_job(tmp_path: Path) -> None:
    code, lines, err = _script(
        tmp_path,
        'submit single --train-args "--algo ppo --total-timesteps 2048"\n'
        "wait-job last RUNNING --timeout 5\n"
        "checkpoint\n"
        "checkpoint all --timeout 30s\n",
    )
    assert code == 0, err
    steps = {s["line"]: s for s in lines if s["type"] == "step"}
    mine, every = steps[3]["result"], steps[4]["result"]
    assert mine["action"] == "checkpoint" and mine["ok"]
    assert [c["run"] for c in mine["data"]["checkpoints"]] == ["raysubmit_1"]
    assert every["data"]["job"] == "all" and len(every["data"]["checkpoints"]) >= 1


def test_a_script_for_a_real_gke_cluster_is_refused_saying_why(tmp_path: Path) -> None:
    kubeconfig = tmp_path / "kubeconfig"
    kubeconfig.write_text("apiVersion: v1\nkind: Config\n")
    gke = {"kubeconfig": str(kubeconfig), "project": "p", "location": "us-east5", "cluster": "c",
           "base_output_directory": "gs://phantom-bucket/maxtext-runs"}  # fmt: skip
    real = parse_config({"cluster": {"provider": "gke"}, "gke": gke}, source="gke.toml")
    code, lines, err = _script(tmp_path, "checkpoint my-workload\n", real)
    assert code == 2 and lines == []  # nothing ran
    assert "checkpoint: only for a cluster whose trainers the console can ask" in err
    assert "a pod's trainer cannot be signalled from here" in err


async def test_an_agent_asks_once_allowed() -> None:
    fake = FakeServices("healthy")
    denied = Calls(fake, Policy(), Scrubber([]))
    refused = await denied.call("checkpoint", {"job": "all"})
    assert refused.reason is Reason.NOT_ALLOWED and "--allow checkpoint" in refused.message
    calls = Calls(fake, Policy.parse(["checkpoint"], False, False), Scrubber([]))
    done = await calls.call("checkpoint", {"job": "raysubmit_sweep7Kq2mX9a"})
    assert done.ok, done.message
    assert [c.args["job"] for c in fake.called("checkpoint")] == ["raysubmit_sweep7Kq2mX9a"]


async def test_a_key_of_the_users_keymap_asks_the_highlighted_job() -> None:
    fake = FakeServices("preempted")
    settings = TuiSettings(tick_s=None, cursor_blink=False, keys={"checkpoint": "k"})
    app = PhantomApp(fake, clock=lambda: T0, settings=settings)
    async with app.run_test(size=(120, 34)) as pilot:
        await settle(pilot)
        titles = [t for t, *_ in PhantomCommands(app.screen).commands()]
        assert "Checkpoint now" not in titles  # it needs a highlighted job
        await pilot.press("2", "k")
        await settle(pilot)
        assert not isinstance(app.screen, ConfirmScreen)  # it stops nothing: no question
        await wait_for(pilot, lambda: bool(fake.called("checkpoint")))
    (call,) = fake.called("checkpoint")
    assert call.args["job"] == "raysubmit_sweep7Kq2mX9a" and call.args["actor"] == "user"


# -- for real: a trainer on the pod emulator -----------------------------------------------------

TRAIN_ARGS = (
    "--algo ppo --env CartPole-v1 --n-envs 2 --total-timesteps 400000 "
    "--checkpoint-every 1000000 --log-every 256 --eval-episodes 1 --wandb disabled "
    "--device cpu --run-name asked-e2e"
)


def _last_progress(text: str) -> int:
    found = re.findall(r"progress step=(\d+)/", text)
    return int(found[-1]) if found else 0


@pytest.mark.slow
@pytest.mark.timeout(900)
async def test_a_real_trainer_asked_on_the_pod_emulator_checkpoints_and_trains_on(
    pod: PodInfo, tmp_path: Path
) -> None:
    svc = make_services(
        pod_config(pod, tmp_path), state_dir=tmp_path / "state", autostart_pod=False
    )
    try:
        await svc.start()
        assert (await svc.bootstrap()).ok
        assert (await svc.ray_up()).ok
        job = await svc.submit(SubmitSpec(train_args=TRAIN_ARGS))

        async def training() -> bool:
            return _last_progress(await svc.job_logs(job.job_id)) > 0

        await until(training, 300, f"job {job.job_id} training")
        calls = Calls(svc, Policy.parse(["checkpoint"], False, False), Scrubber([]))
        asked = await calls.call("checkpoint", {"job": job.job_id, "timeout": 120})
        assert asked.ok, asked.message
        (ckpt,) = asked.data["data"]["checkpoints"]
        assert ckpt["run"] == "asked-e2e"
        # on storage: a complete checkpoint at the step it reached, written because asked
        where = Path(ckpt["uri"].removeprefix("file://"))
        assert where.is_relative_to(pod.bucket)  # the pod's bucket
        manifest = json.loads((where / MANIFEST).read_text())
        assert manifest["trigger"] == "asked" and manifest["step"] == ckpt["step"]

        async def trains_on() -> bool:
            return _last_progress(await svc.job_logs(job.job_id)) > ckpt["step"]

        await until(trains_on, 300, "training past the asked checkpoint")
        assert (await svc.job_status(job.job_id)).status == "RUNNING"
        logs = await svc.job_logs(job.job_id)
        (line,) = ASKED_LINE_RE.finditer(logs)
        assert int(line["step"]) == ckpt["step"] and line["uri"] == ckpt["uri"]
        # journaled: who asked, and what each trainer wrote where
        rows = await svc.events(limit=200, kinds=["action"])
        (row,) = [r for r in rows if r.data.get("action") == "checkpoint"]
        assert row.actor == "mcp" and row.data["checkpoints"][0]["uri"] == ckpt["uri"]
        await svc.stop_job(job.job_id)
    finally:
        await svc.stop()
        svc.close_journal()
