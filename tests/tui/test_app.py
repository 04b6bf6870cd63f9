"""Pilot tests: keys in, intents out (recorded by the fake services), state in, widgets out.

The fake stands at the services boundary (``ConsoleServices``); everything from the update
bus to the rendered table is the real app. Waits are on workers and conditions, never
sleeps.
"""

from __future__ import annotations

import json
import subprocess
import sys
import threading
from dataclasses import replace

from textual import events
from textual.app import App, ComposeResult
from textual.binding import Binding
from textual.pilot import Pilot
from textual.widgets import Input, Log, Select

from console.config import parse_config
from console.screens.confirm import ConfirmScreen
from console.screens.help import SCREENS as HELP_SECTIONS
from console.screens.logview import LogViewScreen
from console.screens.overview import OverviewScreen
from console.screens.palette import PhantomCommands
from console.screens.state import LogRing
from console.screens.submit import SubmitScreen
from console.services.errors import JobsUnavailable
from console.services.model import HostStatus, LogLine
from console.tui.app import PhantomApp, TuiSettings
from console.tui.messages import LatestPod, LogInbox, PodUpdated
from console.widgets.env_input import EnvVarsInput, mask_env_text, parse_env_vars
from console.widgets.fast_table import FastTable
from console.widgets.job_log import JobLog
from console.widgets.table import PhantomTable
from tests.support import REPO
from tests.support.fake_data import NODE, T0, healthy_pod, host
from tests.support.fake_services import FakeServices
from tests.support.tui import make_app, settle, wait_for

ROOT = REPO


def host_table(app: PhantomApp) -> FastTable:
    return app.screen.query_one("#hosts", FastTable)


# recovery --------------------------------------------------------------------------------


async def test_recover_key_on_preempted_pod_calls_the_watchdog() -> None:
    fake = FakeServices("preempted")
    app = make_app(fake)
    async with app.run_test(size=(80, 24)) as pilot:
        await settle(pilot)
        assert "PREEMPTED" in host_table(app).cell_texts(f"{NODE}-w2")
        await pilot.press("r")
        await settle(pilot)
        assert isinstance(app.screen, ConfirmScreen)
        assert not fake.called("recover"), "recovery must wait for the confirmation"
        await pilot.press("y")
        await settle(pilot)
        calls = fake.called("recover")
        assert len(calls) == 1 and calls[0].args["actor"] == "user"
        # The watchdog's published result reaches the screen.
        await wait_for(pilot, lambda: app.state.recovery.ok)
        await wait_for(pilot, lambda: "PREEMPTED" not in host_table(app).cell_texts(f"{NODE}-w2"))


async def test_bring_up_key_on_a_fresh_pod_runs_bootstrap_ray_up_and_tunnel() -> None:
    fake = FakeServices("healthy")
    fresh = tuple(replace(h, ray_state="-", ray_nodes=0) for h in fake.pod.hosts)
    fake.pod = replace(fake.pod, hosts=fresh, tunnel_up=False)
    app = make_app(fake)
    async with app.run_test(size=(80, 24)) as pilot:
        await settle(pilot)
        hint = str(app.screen.query_one("#warnings").render())
        assert "press u to bring it up" in hint
        await pilot.press("u")  # nothing to lose: no confirmation
        await settle(pilot)
        names = [c.name for c in fake.calls if c.name in ("bootstrap", "ray_up", "open_tunnel")]
        assert names == ["bootstrap", "ray_up", "open_tunnel"]


async def test_bring_up_on_a_running_cluster_asks_first() -> None:
    fake = FakeServices("healthy")
    async with make_app(fake).run_test(size=(80, 24)) as pilot:
        await settle(pilot)
        await pilot.press("u")
        await settle(pilot)
        assert isinstance(pilot.app.screen, ConfirmScreen)
        await pilot.press("n")
        await settle(pilot)
        assert not fake.called("bootstrap") and not fake.called("ray_up")


async def test_recover_cancelled_changes_nothing() -> None:
    fake = FakeServices("preempted")
    async with make_app(fake).run_test(size=(80, 24)) as pilot:
        await settle(pilot)
        await pilot.press("r", "n")
        await settle(pilot)
        assert isinstance(pilot.app.screen, OverviewScreen)
        assert not fake.called("recover")


async def test_toggle_auto_recovery_on_recovery_screen() -> None:
    fake = FakeServices("preempted")
    app = make_app(fake)
    async with app.run_test(size=(80, 24)) as pilot:
        await settle(pilot)
        await pilot.press("5", "a")
        await settle(pilot)
        assert [c.args["enabled"] for c in fake.called("set_auto_recovery")] == [False]
        await wait_for(pilot, lambda: app.state.recovery.auto is False)


# submit ------------------------------------------------------------------------------------


async def open_submit_form(app: PhantomApp, pilot: Pilot[int]) -> SubmitScreen:
    """Open the submit form with its key, as a user does."""
    await settle(pilot)
    await pilot.press("s")
    await settle(pilot)
    form = app.screen
    assert isinstance(form, SubmitScreen)
    return form


async def test_submit_through_the_form_sends_the_typed_values() -> None:
    fake = FakeServices("healthy")
    app = make_app(fake)
    async with app.run_test(size=(100, 40)) as pilot:
        form = await open_submit_form(app, pilot)
        # Train args has focus with its text selected: a typed key replaces it, and the rest
        # comes as a terminal's paste (57 keys one by one cost this test ~6 s of CPU).
        await pilot.press("-")
        app.post_message(events.Paste("-algo ppo --total-timesteps 2000 --alpha 0.5 --device cpu"))
        await settle(pilot)
        # Back to the mode select (shift+tab skips the disabled node fields), pick distributed.
        await pilot.press("shift+tab")
        assert form.focused is form.query_one("#mode", Select)
        await pilot.press("enter", "down", "enter")
        await settle(pilot)
        assert form.query_one("#mode", Select).value == "distributed"
        await pilot.press("tab", "ctrl+a", "ctrl+k", "4")  # nodes: 4
        await settle(pilot)
        assert form.query_one("#num_nodes", Input).value == "4"
        assert "ray_distributed_train.py" in str(form.query_one("#preview").render())
        await pilot.press("ctrl+s")
        await settle(pilot)
        assert not isinstance(app.screen, SubmitScreen)
        (call,) = fake.called("submit")
        spec = call.args["spec"]
        assert spec.mode == "distributed"
        assert spec.num_nodes == 4
        assert spec.train_args == "--algo ppo --total-timesteps 2000 --alpha 0.5 --device cpu"
        assert spec.runtime_env["env_vars"]["WANDB_API_KEY"] == "$WANDB_API_KEY"
        assert call.args["actor"] == "user"
        await wait_for(pilot, lambda: "raysubmit_1" in app.state.jobs)


async def test_a_sweep_from_the_form_carries_its_sweep_args() -> None:
    fake = FakeServices("healthy")
    app = make_app(fake)
    async with app.run_test(size=(100, 40)) as pilot:
        form = await open_submit_form(app, pilot)
        form.query_one("#mode", Select).value = "sweep"
        await settle(pilot)
        args = form.query_one("#sweep_args", Input)
        assert not args.disabled  # a sweep field: live in sweep mode only
        args.value = "--trial-timesteps 3000 --max-failures '10"
        await settle(pilot)
        assert "sweep_args" in form.problems and "bad quoting" in form.problems["sweep_args"]
        args.value = "--trial-timesteps 3000 --max-failures 10"
        await settle(pilot)
        assert "sweep_args" not in form.problems
        await pilot.press("ctrl+s")
        await settle(pilot)
        (call,) = fake.called("submit")
        spec = call.args["spec"]
        assert spec.mode == "sweep"
        assert spec.sweep_args == "--trial-timesteps 3000 --max-failures 10"
        assert spec.entrypoint().endswith("--trial-timesteps 3000 --max-failures 10")


async def test_invalid_submit_stays_in_the_form_with_the_field_marked() -> None:
    fake = FakeServices("healthy")
    app = make_app(fake)
    async with app.run_test(size=(100, 40)) as pilot:
        await open_submit_form(app, pilot)
        await pilot.press("-")  # typing replaces the selected text; the rest is pasted
        app.post_message(events.Paste("-algo ppo --alpha 2"))
        await settle(pilot)
        await pilot.press("ctrl+s")
        await settle(pilot)
        form = app.screen
        assert isinstance(form, SubmitScreen), "invalid input must not leave the form"
        assert not fake.called("submit")
        assert "train_args" in form.problems and "--alpha 2" in form.problems["train_args"]
        assert form.query_one("#label-train_args").has_class("-problem")
        assert form.query_one("#train_args", Input).has_class("-invalid")
        assert form.focused is form.query_one("#train_args", Input)
        env = form.query_one("#env_vars", EnvVarsInput)
        env.value = "WANDB_API_KEY=hunter2"
        await settle(pilot)
        assert "hunter2" not in env._value.plain and "env_vars" in form.problems
        env.value = "WANDB_API_KEY=$WANDB_API_KEY"
        # Fix it and the same form submits.
        await pilot.press("backspace", "0", ".", "2")
        await pilot.press("ctrl+s")
        await settle(pilot)
        assert [c.args["spec"].train_args for c in fake.called("submit")] == [
            "--algo ppo --alpha 0.2"
        ]


def test_env_vars_input_never_shows_an_inline_secret() -> None:
    text = "WANDB_PROJECT=phantom WANDB_API_KEY=hunter2 HF_TOKEN=$HF_TOKEN"
    masked = mask_env_text(text)
    assert "hunter2" not in masked and len(masked) == len(text)
    assert "WANDB_PROJECT=phantom" in masked and "HF_TOKEN=$HF_TOKEN" in masked
    assert parse_env_vars("A=1 B=$B") == ({"A": "1", "B": "$B"}, "")
    assert "NAME=value" in parse_env_vars("oops")[1]


# logs ----------------------------------------------------------------------------------------


async def test_log_view_follows_pauses_resumes_and_searches() -> None:
    fake = FakeServices("preempted", close_early=False)
    job = "raysubmit_sweep7Kq2mX9a"
    app = make_app(fake)
    async with app.run_test(size=(80, 24)) as pilot:
        await settle(pilot)
        await pilot.press("2", "enter")
        view = app.screen
        assert isinstance(view, LogViewScreen) and view.job_id == job
        log = view.query_one(Log)
        await wait_for(pilot, lambda: log.line_count == 60)
        fake.push_line(job, "live line 1")
        await wait_for(pilot, lambda: log.lines[-1] == "live line 1")
        # Pause: lines keep arriving in the ring but the view stays put.
        await pilot.press("f")
        assert not view.following
        fake.push_line(job, "live line 2")
        await wait_for(pilot, lambda: app.state.logs[job].total == 62)
        await settle(pilot)
        assert log.lines[-1] == "live line 1"
        assert "+1 new" in str(view.query_one("#log-title").render())
        # Resume (same key): the missed line appears.
        await pilot.press("f")
        await wait_for(pilot, lambda: log.lines[-1] == "live line 2")
        # Search pauses and jumps to a match; n cycles.
        await pilot.press("slash", *"ckpt", "enter")
        await settle(pilot)
        assert not view.following and len(view._matches) == 6
        first = view._match_index
        await pilot.press("n")
        assert view._match_index == (first + 1) % 6
        # End: follow again.
        await pilot.press("G")
        assert view.following
        # The stream closes while the job still runs: banner.
        fake.push_line(job, None)
        await wait_for(pilot, lambda: job in app.state.closed)
        await settle(pilot)
        banner = view.query_one("#banner")
        assert banner.display and "closed early" in str(banner.render())
        await pilot.press("escape")
        await settle(pilot)
        assert not isinstance(app.screen, LogViewScreen)


def test_log_ring_is_bounded_and_reports_what_fell_off() -> None:
    ring = LogRing(maxlen=5)
    ring.extend([str(i) for i in range(3)])
    assert ring.since(0) == (["0", "1", "2"], False)
    ring.extend([str(i) for i in range(3, 10)])
    assert len(ring) == 5 and ring.total == 10
    assert ring.since(8) == (["8", "9"], False)
    assert ring.since(2) == (["5", "6", "7", "8", "9"], True)


# updates from other threads ------------------------------------------------------------------


async def test_updates_published_from_another_thread_reach_the_table() -> None:
    fake = FakeServices("healthy")
    app = make_app(fake)
    async with app.run_test(size=(80, 24)) as pilot:
        await settle(pilot)
        pods = [
            replace(
                healthy_pod(),
                at=T0 + i,
                hosts=(host(0, "PREEMPTED" if i % 2 else "READY"), host(1), host(2), host(3)),
            )
            for i in range(1, 200)
        ]
        thread = threading.Thread(target=lambda: [fake.publish(p) for p in pods])
        thread.start()
        thread.join()
        await wait_for(pilot, lambda: app.state.pod is not None and app.state.pod.at == T0 + 199)
        await settle(pilot)
        assert "PREEMPTED" in host_table(app).cell_texts(f"{NODE}-w0")


async def test_host_rows_redraw_what_a_snapshot_replaced_and_ages_tick_each_second() -> None:
    fake = FakeServices("healthy")
    now = [T0]
    app = PhantomApp(
        fake,  # type: ignore[arg-type]
        clock=lambda: now[0],
        settings=TuiSettings(tick_s=None, cursor_blink=False),
    )
    names = [f"{NODE}-w{i}" for i in range(4)]

    async def show(hosts: tuple[HostStatus, ...], at: float) -> FastTable:
        fake.publish(replace(healthy_pod(), at=at, hosts=hosts))
        await wait_for(pilot, lambda: app.state.pod is not None and app.state.pod.at == at)
        await settle(pilot)
        return host_table(app)

    async with app.run_test(size=(100, 30)) as pilot:
        await settle(pilot)
        hosts = tuple(host(i) for i in range(4))
        table = await show(hosts, T0 + 0.1)
        assert [table.cell_texts(n)[-1] for n in names] == ["2s"] * 4
        # the same second: the replaced host's row changes, the rest is left as drawn
        now[0] = T0 + 0.5
        hosts = (host(0, "PREEMPTED", ray="DEAD", ssh="down"), *hosts[1:])
        table = await show(hosts, T0 + 0.2)
        assert table.cell_texts(names[0])[2] == "PREEMPTED"
        assert [table.cell_texts(n)[2] for n in names[1:]] == ["READY"] * 3
        # hosts in another order: a whole pass, the table follows the order
        hosts = (hosts[1], hosts[0], *hosts[2:])
        table = await show(hosts, T0 + 0.3)
        assert table.row_keys == [names[1], names[0], *names[2:]]
        # the next second: a whole pass, every age ticks (nothing was replaced)
        now[0] = T0 + 2.0
        table = await show(hosts, T0 + 0.4)
        assert [table.cell_texts(n)[-1] for n in names] == ["4s"] * 4
        # a filter: only matching rows, and a replaced host still updates
        app.screen.filter_text = "w3"
        app.screen.render_state(app.screen.WATCHES)
        hosts = (*hosts[:3], host(3, "CREATING"))
        table = await show(hosts, T0 + 0.5)
        assert table.row_keys == [names[3]] and table.cell_texts(names[3])[2] == "CREATING"


def test_pod_messages_collapse_and_log_lines_share_one_doorbell() -> None:
    a, b = PodUpdated(healthy_pod()), PodUpdated(healthy_pod())
    assert a.can_replace(b)
    pods = LatestPod()  # snapshots between other messages: one doorbell, the newest applied
    first, second = healthy_pod(), replace(healthy_pod(), at=T0 + 1)
    assert pods.put(first) is True and pods.put(second) is False
    assert pods.take() is second and pods.superseded == 1 and pods.take() is None
    assert pods.put(first) is True
    inbox = LogInbox(cap=3)
    rang = [inbox.put(LogLine("j", str(i), 0.0)) for i in range(5)]
    assert rang == [True, False, False, False, False]  # one message for the whole burst
    assert [line.text for line in inbox.drain()] == ["2", "3", "4"] and inbox.dropped == 2
    assert inbox.put(LogLine("j", "x", 0.0)) is True


async def test_a_failing_service_call_is_a_notification_not_a_crash() -> None:
    fake = FakeServices("healthy")
    fake.b.raise_in["refresh"] = RuntimeError("TPU API unreachable")
    app = make_app(fake)
    async with app.run_test(size=(80, 24)) as pilot:
        await settle(pilot)
        await pilot.press("ctrl+r")
        await settle(pilot)
        assert fake.called("refresh")
        assert any("TPU API unreachable" in n.message for n in app._notifications)
        assert app.is_running


async def test_ray_not_running_yet_is_a_hint_on_the_jobs_screen_not_an_error() -> None:
    """Opening the console before Ray is up: the jobs list says how to start Ray; no error
    toast for an expected state."""
    fake = FakeServices("empty")
    fake.b.raise_in["list_jobs"] = JobsUnavailable("Ray is not running: press u")
    app = make_app(fake)
    async with app.run_test(size=(80, 24)) as pilot:
        await settle(pilot)
        await pilot.press("2")
        await settle(pilot)
        assert fake.called("list_jobs")
        assert not [n for n in app._notifications if n.severity == "error"]
        summary = str(app.screen.query_one("#jobs-summary").render())
        assert "Ray is not running: press u" in summary


# screens, keys, filter, palette -----------------------------------------------------------------


async def test_number_keys_switch_screens_and_q_quits() -> None:
    fake = FakeServices("healthy")
    app = make_app(fake)
    async with app.run_test(size=(80, 24)) as pilot:
        await settle(pilot)
        seen = []
        for key in "2345671":
            await pilot.press(key)
            await settle(pilot)
            seen.append(app.current_mode)
        # A TPU VM pod has no Workloads screen (GKE's JobSets): 6 is not one of its keys.
        assert seen == ["jobs", "cadence", "events", "recovery", "recovery", "ledger", "overview"]
        await pilot.press("question_mark")
        await settle(pilot)
        assert type(app.screen).__name__ == "HelpScreen"
        await pilot.press("escape", "q")
        await settle(pilot)
    assert fake.stopped, "quitting stops the services' pollers"


async def test_filter_on_1024_hosts_and_cell_level_updates() -> None:
    fake = FakeServices("healthy", n_hosts=1024)
    app = make_app(fake)
    async with app.run_test(size=(80, 24)) as pilot:
        await settle(pilot)
        table = host_table(app)
        assert table.row_count == 1024
        hosts = list(fake.pod.hosts)
        hosts[700] = replace(hosts[700], tpu_state="PREEMPTED", ray_state="DEAD")
        # Only the two changed cells are written, not 1,024 rows.
        app.apply_pod(replace(fake.pod, hosts=tuple(hosts), at=T0))
        assert table.cell_texts(f"{NODE}-w700")[2] == "PREEMPTED"
        await pilot.press("slash", *"preempted")
        await settle(pilot)
        assert table.row_keys == [f"{NODE}-w700"]
        await pilot.press("escape")
        await settle(pilot)
        assert table.row_count == 1024


async def test_sync_rows_writes_only_changed_cells() -> None:
    class TableApp(App[None]):
        def compose(self) -> ComposeResult:
            yield PhantomTable()

    async with TableApp().run_test() as pilot:
        table = pilot.app.query_one(PhantomTable)
        table.set_columns([("a", "A", 3), ("b", "B", 3)])
        rows = [(f"k{i}", ((str(i), ""), ("x", ""))) for i in range(100)]
        assert table.sync_rows(rows) == 200
        rows[42] = ("k42", (("42", ""), ("y", "red")))
        assert table.sync_rows(rows) == 1
        assert table.sync_rows(rows) == 0
        assert table.cell_texts("k42") == ("42", "y")


async def test_a_live_column_is_asked_for_the_visible_rows_only() -> None:
    """An age column that changes every second for every row: drawn from ``set_live`` for
    the rows on screen, never rebuilt into the 1,024 rows' cells (issue 36, item 7)."""
    asked: list[object] = []
    ages = dict.fromkeys((f"k{i}" for i in range(1024)), "1s")

    def seen(key: object) -> tuple[str, str]:
        asked.append(key)
        return (ages[str(key)], "")

    class TableApp(App[None]):
        def compose(self) -> ComposeResult:
            yield FastTable()

    async with TableApp().run_test(size=(40, 10)) as pilot:
        table = pilot.app.query_one(FastTable)
        table.set_columns([("a", "A", 5), ("s", "SEEN", 5)])
        table.set_live(1, seen)
        rows = [(f"k{i}", ((str(i), ""), ("stale", ""))) for i in range(1024)]
        table.sync_rows(rows)
        await pilot.pause()
        assert "1s" in table.render_line(1).text and "stale" not in table.render_line(1).text
        assert 0 < len(set(asked)) <= 10  # the rows on screen, not 1,024
        asked.clear()
        ages.update(dict.fromkeys(ages, "2s"))
        table.refresh_live()
        await pilot.pause()
        assert "2s" in table.render_line(1).text
        assert 0 < len(set(asked)) <= 10
        assert table.cell_texts("k700") == ("700", "2s")  # what a row shows, live included
        assert table.sync_rows(rows) == 0  # the rows' own cells never changed


async def test_the_job_log_measures_its_width_without_a_worker() -> None:
    """Textual's Log starts a thread worker per write to measure the lines; the job log does
    it in the write (at 10,000 lines/s: ~100 workers and blocking hops a second fewer)."""

    class LogApp(App[None]):
        def compose(self) -> ComposeResult:
            yield JobLog(max_lines=100)

    async with LogApp().run_test(size=(40, 10)) as pilot:
        log = pilot.app.query_one(JobLog)
        log.write_lines(["short", "x" * 57, "wide 漢字"])
        assert log.virtual_size.width == 57 and log.line_count == 3
        log.write_lines(["\t" + "y" * 60])  # a tab: as Log expands it
        assert log.virtual_size.width == 68
        assert len(pilot.app.workers) == 0  # nothing measured behind its back


async def test_fast_table_diffs_rows_and_moves_its_cursor() -> None:
    selected: list[object] = []

    class TableApp(App[None]):
        def compose(self) -> ComposeResult:
            yield FastTable()

        def on_fast_table_row_selected(self, event: FastTable.RowSelected) -> None:
            selected.append(event.key)

    async with TableApp().run_test(size=(40, 10)) as pilot:
        table = pilot.app.query_one(FastTable)
        table.set_columns([("a", "A", 5), ("b", "B", 5)])
        rows = [(f"k{i}", ((str(i), ""), ("x", ""))) for i in range(1024)]
        assert table.sync_rows(rows) == 2048
        rows[700] = ("k700", (("700", ""), ("y", "red")))
        assert table.sync_rows(rows) == 1 and table.cell_texts("k700") == ("700", "y")
        await pilot.pause()
        table.focus()
        await pilot.press("end")
        await pilot.pause()
        assert table.highlighted_key() == "k1023" and table.scroll_y > 1000
        await pilot.press("up", "up", "enter")
        await pilot.pause()
        assert table.highlighted_key() == "k1021" and "k1021" in selected
        # Reordering keeps the cursor on the same key.
        table.sync_rows(list(reversed(rows)))
        assert table.highlighted_key() == "k1021" and table.cursor_row == 2


async def test_palette_teardown_asks_then_calls_the_service() -> None:
    fake = FakeServices("healthy")
    app = make_app(fake)
    async with app.run_test(size=(80, 24)) as pilot:
        await settle(pilot)
        provider = PhantomCommands(app.screen)
        titles = [title for title, *_ in provider.commands()]
        assert any(t.startswith("Teardown") for t in titles)
        assert "Re-bootstrap host phantom-pod-w3" in titles
        assert "Open dashboard URL" in titles and "Re-open tunnel" in titles
        hits = [hit async for hit in provider.search("teardown")]
        assert hits
        hits[0].command()
        await settle(pilot)
        assert isinstance(app.screen, ConfirmScreen) and not fake.called("teardown")
        await pilot.press("y")
        await settle(pilot)
        assert fake.called("teardown")
        bootstrap = next(c for t, _, c, _ in provider.commands() if t.endswith("-w3"))
        bootstrap()
        await settle(pilot)
        assert fake.called("bootstrap")[-1].args["hosts"] == [f"{NODE}-w3"]


async def test_stop_job_confirms_first() -> None:
    fake = FakeServices("preempted")
    app = make_app(fake)
    async with app.run_test(size=(80, 24)) as pilot:
        await settle(pilot)
        await pilot.press("2", "x")
        await settle(pilot)
        assert isinstance(app.screen, ConfirmScreen)
        await pilot.press("y")
        await settle(pilot)
        assert [c.args["job_id"] for c in fake.called("stop_job")] == ["raysubmit_sweep7Kq2mX9a"]


def test_every_binding_has_an_id_description_and_tooltip() -> None:
    screens = [cls for cls, _ in HELP_SECTIONS]
    classes = [PhantomApp, PhantomTable, FastTable, *screens]
    for cls in classes:
        if cls in screens:
            assert cls.BINDING_GROUP_TITLE, f"{cls.__name__} has no BINDING_GROUP_TITLE"
        for binding in cls.BINDINGS:
            assert isinstance(binding, Binding)
            assert binding.id and binding.description and binding.tooltip, (cls, binding)


# startup and the real cluster ---------------------------------------------------------------------

STARTUP = """
import asyncio, json, sys
import console.tui.app as console_app
from tests.support.fake_data import T0
from tests.support.fake_services import FakeServices

async def main():
    app = console_app.PhantomApp(FakeServices(), clock=lambda: T0,
                                 settings=console_app.TuiSettings(tick_s=None))
    frames = []
    display = app._display
    def record(screen, renderable):
        if renderable is not None:
            frames.append(1)
        display(screen, renderable)
    app._display = record
    async with app.run_test(size=(80, 24)) as pilot:
        while not frames:
            await pilot.pause(0.01)
        heavy = sorted(m for m in sys.modules if m.split(".")[0] in ("ray", "jax", "torch"))
        print(json.dumps({"frames": len(frames), "heavy": heavy,
                          "screen": type(app.screen).__name__}))

asyncio.run(main())
"""


def test_first_frame_without_ray_jax_or_torch() -> None:
    proc = subprocess.run(
        [sys.executable, "-c", STARTUP], capture_output=True, text=True, cwd=ROOT, timeout=300
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    result = json.loads(proc.stdout.strip().splitlines()[-1])
    assert result["frames"] >= 1 and result["screen"] == "OverviewScreen"
    assert result["heavy"] == [], f"imported before the first frame: {result['heavy']}"


def test_leaving_says_what_keeps_running_and_how_to_stop_it() -> None:
    """`q` leaves the pod and Ray up on purpose; the terminal is told what and how to stop."""
    from console.config import Config
    from console.tui.main import farewell
    from console.wiring import capabilities_for

    local = Config()
    note = farewell(local, healthy_pod(), capabilities_for(local))
    assert "still running: the emulated pod phantom-pod (4 hosts) with Ray on 4 host(s)" in note
    assert "echo teardown | phantom --script -" in note and "phantom pod down" in note
    gcp = parse_config({"cluster": {"provider": "gcp", "project": "p", "zone": "us-central2-b"}})
    note = farewell(gcp, healthy_pod(), capabilities_for(gcp))
    assert "gcloud compute tpus tpu-vm delete phantom-pod --zone=us-central2-b --project=p" in note
    assert farewell(local, None, capabilities_for(local)) == ""
    # GKE: the JobSets keep running, not TPU VMs; the emulator's own way to stop
    gke = FakeServices("gke")
    note = farewell(gke.config, gke.pod, gke.capabilities)
    assert "still running: 1 workload(s) (grpo) on the local GKE emulator (8 nodes)" in note
    assert "phantom gke down" in note and "workload delete NAME" in note
    assert "TPU VMs" not in note and "gcloud" not in note and "teardown" not in note
