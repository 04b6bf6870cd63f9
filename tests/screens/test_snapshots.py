"""Snapshot tests: every screen at 80x24 (a tmux pane) and 160x48, from fixed fake data.

Deterministic: the clock is fixed (``T0``), the "ago" ticker is off, cursors do not blink,
times render in UTC, and every worker has finished before the screenshot. Regenerate with
``pytest tests/test_snapshots.py --snapshot-update`` and look at the SVGs before committing.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from dataclasses import replace

import pytest
from textual.command import CommandList
from textual.pilot import Pilot
from textual.widgets import Input, Select

from console.config import Config, WandbConfig
from console.tui.app import PhantomApp
from tests.support.fake_data import RUNTIME_ENV
from tests.support.fake_fleet import fake_fleet
from tests.support.fake_services import T0, FakeServices
from tests.support.incident_rows import journaled, recorded
from tests.support.ledger_rows import drill
from tests.support.tui import keys, make_app, make_fleet_app, wait_for
from tests.support.tui import settle as settle_workers


async def settle(pilot: Pilot[int]) -> None:
    """Every worker done, the fakes' closing log streams too: what the screenshot shows."""
    await settle_workers(pilot, streams=True)


SIZES = [pytest.param((80, 24), id="80x24"), pytest.param((160, 48), id="160x48")]


@pytest.fixture(autouse=True)
def utc(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    monkeypatch.setenv("TZ", "UTC")
    time.tzset()
    yield
    monkeypatch.undo()
    time.tzset()


def _palette_hits(pilot: Pilot[object]) -> int:
    try:
        return pilot.app.screen.query_one(CommandList).option_count
    except Exception:
        return 0


@pytest.mark.parametrize("size", SIZES)
def test_overview(snap_compare, size):
    """Pod overview with host w2 PREEMPTED (red, Ray DEAD, SSH down) and w3 showing ALIVE×2
    (a duplicate Ray node, yellow). Summary says 3/4 ready, ray 3/4 alive, tunnel down; three
    warnings; the status line on top shows the tabs, `3/4 ready ray 3/4 ⚠3 ⟳`. Footer lists
    enter, /, r, the 1-6 screen keys, ?, q and s."""
    assert snap_compare(make_app(), terminal_size=size, run_before=keys())


@pytest.mark.parametrize("size", SIZES)
def test_overview_gke(snap_compare, size):
    """Overview on a GKE cluster (the v5p-64 slice's 8 nodes): columns NODE, POOL, STATE,
    HEALTH, RESOURCES, SEEN, no Ray or SSH column; each node by its own part of the name
    (3e01e57e-0000 ... -0007), all READY; the summary counts pods and workloads, not Ray or
    a tunnel. The footer offers r but no `u Bring up` (GKE declares no VMs to bring up)."""
    assert snap_compare(make_app("gke"), terminal_size=size, run_before=keys("1"))


@pytest.mark.parametrize("size", SIZES)
def test_overview_filtered(snap_compare, size):
    """Overview after `/` and typing `preempted`: only w2 is listed and the summary says
    `filter 'preempted': 1 of 4 hosts`; the filter box sits above the table."""

    async def run(pilot: Pilot[object]) -> None:
        await settle(pilot)
        await pilot.press("slash", *"preempted")
        await settle(pilot)

    assert snap_compare(make_app(), terminal_size=size, run_before=run)


@pytest.mark.parametrize("size", SIZES)
def test_jobs(snap_compare, size):
    """Jobs screen (key 2): three jobs newest first — RUNNING sweep (green, ENV ok), FAILED
    distributed (red, ENV `!` in yellow: it lacked PHANTOM_JAX_PLATFORM), SUCCEEDED smoke
    test (ENV blank: never checked) — with start age and entrypoint (cut with … at 80
    columns). ERR/PRE (errors in a row / preemptions of the job's chain): the sweep 0/2
    (yellow), the failed job 2/1 (red: one more error and recovery stops resubmitting it), the
    smoke test 0/0 (dim). Summary: 3 jobs, 1 running, 1 failed, 1 without the expected env."""
    assert snap_compare(make_app(), terminal_size=size, run_before=keys("2"))


@pytest.mark.parametrize("size", SIZES)
def test_job_log(snap_compare, size):
    """Log of the running sweep (enter on jobs): title says RUNNING, 60 lines, following; a
    yellow banner says the stream closed early while the job still runs; the newest lines
    (ending with step 122880) fill the view."""
    assert snap_compare(make_app(), terminal_size=size, run_before=keys("2", "enter"))


@pytest.mark.parametrize("size", SIZES)
def test_job_log_search(snap_compare, size):
    """The same log after `/ckpt` + enter: follow is paused (footer offers `f Follow`), the
    title shows `paused` and `/ckpt 5/6 (n/N)` (the first match at or below the top of the
    view, like less), and every `ckpt` is highlighted in yellow."""

    async def run(pilot: Pilot[object]) -> None:
        await keys("2", "enter")(pilot)
        await pilot.press("slash", *"ckpt", "enter")
        await settle(pilot)

    assert snap_compare(make_app(), terminal_size=size, run_before=run)


@pytest.mark.parametrize("size", SIZES)
def test_cadence(snap_compare, size):
    """Cadence (key 3): ppo_rl_study-01 is STALLED (red, sorted first, its interval
    sparkline ends in a spike); the detail panel below shows it with `STALLED: nothing for
    126× its median interval` and a full-width sparkline."""
    assert snap_compare(make_app(), terminal_size=size, run_before=keys("3"))


@pytest.mark.parametrize("size", SIZES)
def test_events(snap_compare, size):
    """Events (key 4): the journal newest first in UTC — watchdog recover, stall, w2
    preempted, duplicate Ray node on w3, user's sweep submit, an earlier recovery with
    `(MTTR 2m14s)`. Summary: 9 events, 2 preemptions, 1 recoveries, last MTTR 2m14s."""
    assert snap_compare(make_app(), terminal_size=size, run_before=keys("4"))


def head_preemption_app() -> PhantomApp:
    """The healthy pod after a worker and then the head were preempted and recovered: the
    rows the console journaled in a real run, replayed through the real incident logic."""
    app = make_app("healthy")
    services = app.services
    assert isinstance(services, FakeServices)
    services.events_list = journaled(recorded(start=T0 - 120))
    return app


def test_events_after_a_head_preemption(snap_compare):
    """Events at 80x24 after a head preemption: one row per incident, newest first. On top,
    the teardown's rows (tunnel closed, job stopped, ray stop); then `▸ preempted  w0` (green:
    `head: MTTR 42.0s, 1 job resubmitted…`), the user's `preempted phantom-pod-w0` and the
    tunnel down it caused, then `▸ preempted  w1` (`MTTR 5.1s, 19 rows`) and the user's
    earlier actions, all in time order. Summary: 67 events, 2 incidents, 2 preemptions, 2
    recoveries, last MTTR 42.0s. The footer lists `a All rows`."""
    assert snap_compare(head_preemption_app(), terminal_size=(80, 24), run_before=keys("4"))


def test_events_incident_opened(snap_compare):
    """The head's incident opened with `enter` (▾ preempted w0): under it, indented, its rows
    in the order they happened: w0 unreachable, head_lost, tpu state READY -> PREEMPTED,
    preempted, recovering, then each recovery step once, labelled by its step (detect,
    recreate, orphans, wait_ready, bootstrap, head) among the TPU state and host-key rows,
    and at the bottom the first `ray down` row of the rebuild (the rest scroll below)."""
    assert snap_compare(
        head_preemption_app(),
        terminal_size=(80, 24),
        run_before=keys("4", "down", "down", "down", "enter"),
    )


def ledger_app() -> PhantomApp:
    """The healthy pod's journal over 2h40m: job W ran and succeeded; job A ran until its
    pod was lost, capacity was short for 10 min, the head was rebuilt and A resubmitted as
    B, which ran to success (``tests.support.ledger_rows.drill``, through the real sink)."""
    app = make_app("healthy")
    services = app.services
    assert isinstance(services, FakeServices)
    services.events_list = journaled(drill(start=T0 - 8400, scale=20, earlier_job=True))
    return app


@pytest.mark.parametrize("size", SIZES)
def test_ledger(snap_compare, size):
    """Ledger (key 7; the tab line shows `7 Ledger`): `goodput 76.2% of 2h40m  1 incident
    2 jobs`; `16 chips v4-32  42.67 chip-h  spot $41.39 vs on-demand $104.76: saved $63.37`
    (green). The legend (productive, detect, recover, capacity, queued, idle), then three
    bars on one time axis: `pod` 76% (green W, a blue sliver, green A, the incident as
    red/magenta/yellow cells, green B, dim idle dots at the end), `W` 96% (green, then
    blank) and `A` 78% (blank, queued, green, the incident, green). Totals by cause (recover
    13m20s, capacity 10m00s), recovery per step (head 6m40s first), the no-steps note and
    the advice (no checkpoint save measured yet). The footer lists ctrl+r Refresh."""
    assert snap_compare(ledger_app(), terminal_size=size, run_before=keys("7"))


@pytest.mark.parametrize("size", SIZES)
def test_recovery(snap_compare, size):
    """Recovery (key 5) mid-run: detect/recreate/wait_ready done (✓, full bars), bootstrap
    running on try 2 with a 3/4 bar and per-host marks w0✓ w1✓ w2… w3✗ plus the error;
    later steps pending (○, empty bars). Summary: auto, RECOVERING for 4m08s."""
    assert snap_compare(make_app(), terminal_size=size, run_before=keys("5"))


@pytest.mark.parametrize("size", SIZES)
def test_recovery_confirm(snap_compare, size):
    """`r` on the overview: a red-bordered confirmation naming the not-READY host w2 and
    what recovery will do; Cancel is focused, `y` confirms, `n`/esc cancels."""
    assert snap_compare(make_app(), terminal_size=size, run_before=keys("r"))


@pytest.mark.parametrize("size", SIZES)
def test_submit_form(snap_compare, size):
    """Submit form (key s) with the config's runtime env: mode single, default train args,
    pip list, env vars with the W&B key as a `$WANDB_API_KEY` reference; node/sweep fields
    are disabled (dim) in single mode; the exact `ray job submit …` command is shown."""
    assert snap_compare(make_app(), terminal_size=size, run_before=keys("s"))


@pytest.mark.parametrize("size", SIZES)
def test_submit_form_validation_error(snap_compare, size):
    """Distributed mode with `--alpha 2` and 0 nodes and an inline secret, after ctrl+s:
    the form stays open; Train args, Nodes and Env vars labels are red and listed under
    the fields with the reason; the secret value shows as dots (never the text); the
    command preview is dimmed; an error toast says it was not submitted."""

    async def run(pilot: Pilot[object]) -> None:
        await keys("s")(pilot)
        screen = pilot.app.screen
        screen.query_one("#mode", Select).value = "distributed"
        screen.query_one("#train_args", Input).value = "--algo ppo --alpha 2 --device cpu"
        screen.query_one("#num_nodes", Input).value = "0"
        screen.query_one("#env_vars", Input).value = "WANDB_PROJECT=phantom WANDB_API_KEY=hunter2"
        await settle(pilot)
        await pilot.press("ctrl+s")
        await settle(pilot)

    assert snap_compare(make_app(), terminal_size=size, run_before=run)


@pytest.mark.parametrize("size", SIZES)
def test_workload_form(snap_compare, size):
    """`s` on a GKE cluster opens the new-workload form, not the Ray job form: the config's
    image, command and TPU type, spot on; the convert fields are disabled (dim) for the
    standard template; with a name typed, the equivalent `xpk workload create` line, where
    the run writes, and the secret that travels as a Kubernetes Secret (its key, no value)."""

    async def run(pilot: Pilot[object]) -> None:
        await keys("s")(pilot)
        pilot.app.screen.query_one("#name", Input).value = "grpo-llama3"
        await settle(pilot)

    assert snap_compare(make_app("gke"), terminal_size=size, run_before=run)


@pytest.mark.parametrize("size", SIZES)
def test_help(snap_compare, size):
    """Help (`?`): intro naming the palette's rare actions, then every key grouped by
    screen (Everywhere, Tables, Pod overview, Jobs, …) with description and tooltip."""
    assert snap_compare(make_app(), terminal_size=size, run_before=keys("question_mark"))


@pytest.mark.parametrize("size", SIZES)
def test_host_detail(snap_compare, size):
    """enter on w2 in the overview: PREEMPTED, Ray DEAD (1 node), SSH down, last seen
    08:49:08 (4m ago); footer offers re-bootstrap and, on the emulator, preempt/recreate."""
    assert snap_compare(make_app(), terminal_size=size, run_before=keys("down", "down", "enter"))


@pytest.mark.parametrize("size", SIZES)
def test_palette(snap_compare, size):
    """Command palette (ctrl+p) searched for `host w1`: re-bootstrap, preempt and recreate
    commands for phantom-pod-w1, each with its help line."""

    async def run(pilot: Pilot[object]) -> None:
        await settle(pilot)
        await pilot.press("ctrl+p", *"host w1")
        # The palette gathers hits in tasks of its own: poll until all three are listed.
        await wait_for(pilot, lambda: _palette_hits(pilot) >= 3)
        await settle(pilot)

    assert snap_compare(make_app(), terminal_size=size, run_before=run)


@pytest.mark.parametrize("size", SIZES)
def test_overview_empty(snap_compare, size):
    """Before the first poll: the overview says no snapshot yet and the status line says
    `waiting for first poll`; no crash on an empty pod."""
    assert snap_compare(make_app("empty"), terminal_size=size, run_before=keys())


# GKE ---------------------------------------------------------------------------------------


@pytest.mark.parametrize("size", SIZES)
def test_workloads(snap_compare, size):
    """Workloads (key 6) on GKE: the tab bar adds `6 Workloads` (keys only at 80 columns,
    where the labels do not fit) and the health says `pods 8/8`. JobSets as `kubectl get
    jobset` lists them: grpo (RESTARTS 1 in yellow, PODS 8/8 green, AGE 1h00m) and the
    conversion Job to-maxtext (Completed). At 160 columns TERMINALSTATE COMPLETED SUSPENDED
    are separate columns; at 80 they fold into STATE. Below, `pods of grpo 8/8 running` and
    its 8 pods (READY 1/1, Running green, AGE 10m, the node's name cut from the left at 80).
    Footer: l Logs, x Delete, p Preempt (the emulator)."""
    assert snap_compare(make_app("gke"), terminal_size=size, run_before=keys("6"))


@pytest.mark.parametrize("size", SIZES)
def test_workloads_slice_preempted(snap_compare, size):
    """The slice under grpo is being reclaimed, after tab (focus on the pods): the summary
    says `8 disrupted pods` in red; grpo's REASON is `8 disrupted`, PODS 0/8; every pod row
    is red (0/1, ExitCode:143); the line under the pods is the highlighted pod's message
    `TerminationByKubelet: Pod was terminated in response to imminent node shutdown.`; the
    status line says `0/8 ready pods 0/8 ⚠1`."""
    assert snap_compare(make_app("gke_preempted"), terminal_size=size, run_before=keys("6", "tab"))


@pytest.mark.parametrize("size", SIZES)
def test_cadence_tunix_metrics(snap_compare, size):
    """Cadence (key 3) on GKE: the grpo run (tensorboard, a step every 1.0s, running) and,
    under its interval sparkline, `metrics steps 1–40` and one line per Tunix metric in the
    tutorial's order — rewards/mean 0.643 and score/mean 0.603 rising, rollout_time 0.65s,
    completions/mean_length 380 rising, actor_dequeue_time 0.05s, step_time_sec 1.00s —
    each with a cyan sparkline as wide as the screen allows."""
    assert snap_compare(make_app("gke"), terminal_size=size, run_before=keys("3"))


def _wandb_sweep_services() -> FakeServices:
    """The fixtures, on a console whose jobs log to the W&B emulator, the running sweep
    on the W&B backend with the id the console learned from it."""
    config = Config(
        runtime_env=RUNTIME_ENV,
        wandb=WandbConfig(
            mode="online", entity="lab", project="seed000", base_url="http://127.0.0.1:8765"
        ),
    )
    svc = FakeServices(config=config)
    job = svc.jobs["raysubmit_sweep7Kq2mX9a"]
    svc.jobs[job.job_id] = replace(
        job,
        entrypoint=job.entrypoint.replace("--backend tune", "--backend wandb"),
        sweep_id="k3v9x2ab",
        sweep_url="http://127.0.0.1:8765/lab/seed000/sweeps/k3v9x2ab",
    )
    return svc


@pytest.mark.parametrize("size", SIZES)
def test_jobs_wandb_sweep(snap_compare, size):
    """Jobs screen with the running sweep on W&B: under the summary line, `sweep k3v9x2ab`
    and its page on the W&B emulator, `W&B http://127.0.0.1:8765/lab/seed000/sweeps/k3v9x2ab`
    (underlined, whole at 80 columns), also with another job (not a sweep) highlighted."""
    app = make_app(_wandb_sweep_services())
    assert snap_compare(app, terminal_size=size, run_before=keys("2", "down"))


@pytest.mark.parametrize("size", SIZES)
def test_submit_form_wandb_sweep(snap_compare, size):
    """Submit form in sweep mode via wandb: the command preview runs `engine.sweep --backend
    wandb ... --agents-per-node 2`, and under it `W&B sweep:
    http://127.0.0.1:8765/lab/phantom/sweeps/<id>` (entity from the config, project from the
    form's env vars; `<id>` until W&B gives the sweep its id)."""

    async def run(pilot: Pilot[object]) -> None:
        await keys("s")(pilot)
        screen = pilot.app.screen
        screen.query_one("#mode", Select).value = "sweep"
        await settle(pilot)
        screen.query_one("#sweep_backend", Select).value = "wandb"
        screen.query_one("#agents_per_node", Input).value = "2"
        await settle(pilot)

    assert snap_compare(make_app(_wandb_sweep_services()), terminal_size=size, run_before=run)


# A fleet -------------------------------------------------------------------------------------


@pytest.mark.parametrize("size", SIZES)
def test_fleet(snap_compare, size):
    """A fleet of three (``tests.support.fake_fleet``) opens on its Fleet screen: the header
    says `pod-a · TPU VM pod + Ray │ 0 Fleet 1 2 3 4 5` (no 6: pod-a has no Workloads) and
    pod-a's health. Summary: 3 clusters, 1 whole (yellow), 1 recovering, 1 open incident,
    spot $70.24/h. Rows: `▸ pod-a` (magenta: recovering) gcp us-central2-b v4-32 3/4 (red)
    ray 3/4, recoveries `1+⟳`, last preemption `4m w2`, cadence STALLED 1, $15.52
    us-central2; pod-b local local-b v5litepod-16 4/4 ray 4/4, never preempted, $7.68
    local-b; grpo (red) gke us-east5 v5p-64 0/8 jobset 0/2, 1 open incident, preempted
    `1m phan…np-0` (its slice's name cut in the middle), $47.04 us-east5. At 80 columns the table scrolls sideways after READY. The
    footer: enter, /, `012345 screens`, C Cluster, ?, q, s."""
    assert snap_compare(make_fleet_app(), terminal_size=size, run_before=keys())


def fleet_ledger_app() -> PhantomApp:
    """The fleet of three with journals for the ledger: pod-a the drill of ``ledger_app``
    (2h40m to ``T0``), grpo the drill at half the scale from 2h before ``T0`` (idle for
    the last 53 min), pod-b no rows at all."""
    fleet = fake_fleet()
    fleet["pod-a"].events_list = journaled(drill(start=T0 - 8400, scale=20, earlier_job=True))
    fleet["grpo"].events_list = journaled(drill(start=T0 - 7200, scale=10))
    return make_fleet_app(fleet)


@pytest.mark.parametrize("size", SIZES)
def test_fleet_ledger(snap_compare, size):
    """Ledger (`7`) in a fleet of three: `Fleet  3 clusters`, then a row per cluster and the
    total (bold): `▸pod-a` (bold, the cluster shown) 76.2% of 2h40m, 42.67 chip-h, spot
    $41.39 vs on-demand $104.76, saved $63.37 (green); pod-b `-` and zeros (no rows); grpo
    (v5p-64: $1.47/chip-h) 43.5% of 2h00m, 64.00 chip-h, spot $94.08 vs $116.85, saved
    $22.77; total the sums: 4h40m, 1h45m badput, 106.67 chip-h, $135.47 spot, $221.61
    on-demand, saved $86.14, goodput 62.2% (productive over wall). Then badput by cause, a
    column per cause any cluster lost time to (detect, recover, capacity, queued, idle), a
    row per cluster and the total (idle 1h01m). Below, `pod-a` underlined and its own
    ledger as on a lone cluster, each bar's goodput at the end of its line beside the
    scrollbar (at 80x24 the totals are below the fold)."""
    assert snap_compare(fleet_ledger_app(), terminal_size=size, run_before=keys("7"))


def test_fleet_cluster_opened(snap_compare):
    """`down`, `down`, `enter` on the Fleet screen at 80x24: grpo's Overview, its header
    `grpo · GKE + JobSets │ 0 1 Overview 2 3 4 5 6` and `0/8 ready pods ...`; its
    v5p-64 slice's 8 nodes; the footer offers `0123456 screens` (GKE has Workloads)."""
    assert snap_compare(
        make_fleet_app(), terminal_size=(80, 24), run_before=keys("down", "down", "enter")
    )
