"""The Phantom Console TUI: renders what the services publish, sends intents back to them.

``PhantomApp`` takes its services, clock and settings in ``__init__`` (tests hand it a fake or
the emulator-backed services); ``make_app(config)`` builds the real ones and ``run_tui`` is
what bare ``phantom`` runs. Its keys come from the keymap (``screens.keys``, the user's
``[keys]`` over the default) and run commands (``console.commands``) through ``tui.session``. The app never touches the network: every service call runs in a
worker and a failure becomes a notification, never a crash. Updates arrive from any thread
through ``UpdateBridge`` as Textual messages; the app folds them into ``ConsoleState`` and
asks the visible screen to re-render what changed.

Importing this module must stay cheap: no ray/jax/torch (the real services are imported
lazily by ``make_app``), so the first frame shows fast.
"""

from __future__ import annotations

import asyncio
import dataclasses
import functools
import gc
import os
import sys
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar, TypeVar

from textual import work
from textual.app import App
from textual.binding import BindingType
from textual.command import CommandPalette
from textual.screen import Screen
from textual.worker import Worker

from console.commands import Command, by_name, execute
from console.commands.kit.params import Kind
from console.screens.base import PhantomScreen
from console.screens.cadence import CadenceScreen
from console.screens.confirm import ConfirmScreen
from console.screens.events import EventsScreen
from console.screens.fleet import FleetScreen
from console.screens.fleet_state import ClusterView
from console.screens.help import HelpScreen
from console.screens.host import HostScreen
from console.screens.jobs import JobsScreen
from console.screens.keys import FLEET, UserKeymap, bindings, screens_of
from console.screens.ledger import LedgerScreen
from console.screens.logview import LogViewScreen
from console.screens.overview import OverviewScreen
from console.screens.palette import PhantomCommands, SteadyPalette
from console.screens.recovery import RecoveryScreen
from console.screens.state import DEFAULT_LOG_RING, ConsoleState
from console.screens.submit import SubmitScreen
from console.screens.workload_form import WorkloadFormScreen
from console.screens.workloads import WorkloadsScreen
from console.services.api import ConsoleServices
from console.services.capabilities import Capability
from console.services.errors import JobsUnavailable
from console.services.jobs.spec import SubmitSpec
from console.services.jobs.sweeplink import wandb_sweep_url
from console.services.jobs.workload import WorkloadSpec
from console.services.ledger.book import read_book
from console.services.ledger.fleet import read_fleet
from console.services.model import (
    JobInfo,
    JobStatus,
    LogLine,
    LogStreamClosed,
    PodSnapshot,
)
from console.tui.messages import (
    CadenceUpdated,
    ClusterBridge,
    ClusterPolled,
    ClusterRecorded,
    EventLogged,
    JobUpdated,
    LatestPod,
    LogClosed,
    LogInbox,
    LogsArrived,
    MetricsUpdated,
    PodUpdated,
    RecoveryUpdated,
    UpdateBridge,
)
from console.tui.session import TuiSession, selected_args, tell_result

T = TypeVar("T")
GC_YOUNG_THRESHOLD = 10_000  # allocations between young collections (CPython default 700)


@dataclass(frozen=True)
class TuiSettings:
    initial_mode: str = ""  # "": the home screen (a fleet of several: Fleet; else Overview)
    tick_s: float | None = 1.0  # re-render "ago" columns; None: never (snapshot tests)
    cursor_blink: bool = True
    log_ring: int = DEFAULT_LOG_RING  # lines kept per job
    manage_services: bool = True  # call services.start() on mount and stop() on quit
    stop_timeout_s: float = 10.0
    # Freeze what startup allocated out of the garbage collector's full scans: a gen-2
    # pass over every widget and cache stalled frames by ~100 ms under a 10k lines/s log.
    # Process-wide, so off by default (tests run many apps in one process); run_tui sets it.
    gc_freeze: bool = False
    keys: Mapping[str, str] = dataclasses.field(default_factory=dict)
    """The user's keymap (``[keys]``): a command or a key's id -> its keys."""


class PhantomApp(App[int]):
    CSS_PATH = str(Path(__file__).with_name("app.tcss"))  # absolute: subclasses live elsewhere
    TITLE = "Phantom Console"
    BINDING_GROUP_TITLE = "Phantom"
    COMMANDS = App.COMMANDS | {PhantomCommands}
    MODES: ClassVar[dict[str, str | Callable[[], Screen[Any]]]] = {
        FLEET: FleetScreen,
        "overview": OverviewScreen,
        "jobs": JobsScreen,
        "cadence": CadenceScreen,
        "events": EventsScreen,
        "recovery": RecoveryScreen,
        "workloads": WorkloadsScreen,
        "ledger": LedgerScreen,
    }
    BINDINGS: ClassVar[list[BindingType]] = list(bindings("app"))

    def action_command_palette(self) -> None:
        """Textual's palette (ctrl+p), its cursor blinking as the settings say."""
        if self.use_command_palette and not isinstance(self.screen, CommandPalette):
            self.push_screen(SteadyPalette(cursor_blink=self.settings.cursor_blink))

    def __init__(
        self,
        services: ConsoleServices,
        *,
        clock: Callable[[], float],
        settings: TuiSettings | None = None,
        fleet: Mapping[str, ConsoleServices] | None = None,
    ) -> None:
        """``fleet``: every cluster's services by name (``services`` is the one shown
        first); with several, the Fleet screen is home and a row per cluster is kept."""
        super().__init__()
        self.services = services
        self.fleet: dict[str, ConsoleServices] = dict(fleet or {})
        self.fleet_state: dict[str, ClusterView] = {
            name: ClusterView(
                member.settings.cluster, member.capabilities, member.settings.ledger.pricing
            )
            for name, member in self.fleet.items()
        } if len(self.fleet) > 1 else {}  # fmt: skip
        self._fleet_bridges: dict[str, ClusterBridge] = {}
        self._switch_lock = asyncio.Lock()
        self._fleet_unsubscribe: list[Callable[[], None]] = []
        self.clock = clock
        self.settings = settings or TuiSettings()
        self.state = ConsoleState(log_ring=self.settings.log_ring)
        self._inbox = LogInbox(cap=max(200_000, 4 * self.settings.log_ring))
        self._following: str | None = None
        self._pods = LatestPod()
        self._bridge = UpdateBridge(self, self._inbox, skip_line=self._is_followed, pods=self._pods)
        self._unsubscribe: Callable[[], None] | None = None
        self._services_stopped = False
        self._last_spec = SubmitSpec(runtime_env=dict(services.settings.runtime_env))
        self._last_workload = services.settings.workload
        # The user's keys over the default keymap (a KeymapError names the problem: the
        # entry point turns it into a config error before the app starts).
        self.keymap = UserKeymap.check(self.settings.keys)
        for key in self.keymap.added:  # a command of the console's with no key of its own
            command = key.command
            assert command is not None
            self.bind(key.key, f"run('{command.name}')", description=command.title)
        self.session = TuiSession(self)

    # workers: every service call runs off the key handler, errors become notifications --

    async def _call(self, label: str, awaitable: Awaitable[T]) -> T | None:
        try:
            return await awaitable
        except asyncio.CancelledError:
            raise
        except Exception as exc:
            self.notify(f"{label} failed: {exc}", title=label, severity="error", timeout=10)
            return None

    def confirm(self, title: str, body: str, label: str, then: Callable[[], object]) -> None:
        def done(ok: bool | None) -> None:
            if ok:
                then()

        self.push_screen(ConfirmScreen(title, body, label), done)

    def dashboard_url(self) -> str:
        pod = self.state.pod
        if pod is not None and pod.dashboard_url:
            return pod.dashboard_url
        return f"http://127.0.0.1:{self.services.settings.dashboard_port}"

    # commands: a key or a palette entry runs one (``check_action`` offers it where the
    # cluster can), with what the screen has selected ---------------------------------------

    def action_run(self, name: str) -> None:
        command = by_name(name)
        if command is None:  # a keymap's name is checked when the app is made
            self.notify(f"no command {name!r}", severity="error")
            return
        screen = self.screen
        selection = screen.selection() if isinstance(screen, PhantomScreen | HostScreen) else {}
        self.run_selected(command, selection)

    def run_selected(self, command: Command[Any], selection: Mapping[Kind, str]) -> None:
        """Run ``command`` on ``selection`` (what a screen has highlighted), after its
        confirmation where it asks one."""
        args = selected_args(self, command, selection)
        if args is None:
            return
        ask = command.confirm(args, self.state.pod) if command.confirm is not None else None
        if ask is None:
            self.start_command(command, args)
            return
        self.confirm(ask.title, ask.body, ask.label, lambda: self.start_command(command, args))

    def start_command(self, command: Command[Any], args: Any) -> Worker[None]:
        """Run ``command`` now, in a worker of its own; what became of it is a notification."""
        return self.run_worker(
            self._run_command(command, args), group=command.name, exit_on_error=False
        )

    async def _run_command(self, command: Command[Any], args: Any) -> None:
        result = await execute(command, self.session, args)
        tell_result(self, command, result)
        if any(a.kind == Kind.JOB for a in command.params):
            self.refresh_jobs()  # a job's state changed: the list shows it

    def action_open_dashboard(self) -> None:
        url = self.dashboard_url()
        # Only hand the URL to a browser when there is a desktop: in a bare tmux/ssh session
        # `webbrowser` may start a text browser on this very terminal.
        if (
            sys.platform == "darwin"
            or os.environ.get("DISPLAY")
            or os.environ.get("WAYLAND_DISPLAY")
        ):
            self.open_url(url)
        self.notify(url, title="Ray dashboard", timeout=15)

    # lifecycle -----------------------------------------------------------------------------

    async def on_mount(self) -> None:
        if self.keymap.keymap:
            self.set_keymap(dict(self.keymap.keymap))
        self._unsubscribe = self.services.subscribe(self._bridge)
        self._pull_local_state()
        for name, member in self.fleet.items() if self.fleet_state else ():
            bridge = self._fleet_bridges[name] = ClusterBridge(self, name)
            self._fleet_unsubscribe.append(member.subscribe(bridge))
            self._pull_cluster(name)
        await self.switch_mode(self.settings.initial_mode or self.home_mode())
        if self.settings.tick_s:
            self.set_interval(self.settings.tick_s, self._tick)
        # Paint first: the services (on a fresh machine, the pod emulator) come up behind
        # the first frame, which shows them coming.
        self.call_after_refresh(self.start_services)
        if self.settings.gc_freeze:
            self.call_after_refresh(self._freeze_startup_objects)

    def _freeze_startup_objects(self) -> None:
        gc.collect()
        gc.freeze()
        # A larger young generation: at 10k log lines/s objects are always in flight
        # (queues, batches); with the default 700 each young pass promotes them, and those
        # promotions started a full pass about every second (30-70 ms under load: the
        # host-update p99 at 10,000 hosts was 110-260 ms). Now they die young, full passes
        # come every ~10 s (`python -m benchmarks.tui` prints both figures).
        gc.set_threshold(GC_YOUNG_THRESHOLD, *gc.get_threshold()[1:])

    def on_unmount(self) -> None:
        self._unsubscribe_all()

    def _unsubscribe_all(self) -> None:
        if self._unsubscribe is not None:
            self._unsubscribe()
            self._unsubscribe = None
        while self._fleet_unsubscribe:
            self._fleet_unsubscribe.pop()()

    async def action_quit(self) -> None:
        await self._stop_services()
        self.exit(0)

    async def _stop_services(self) -> None:
        self._unsubscribe_all()
        if self._services_stopped or not self.settings.manage_services:
            return
        self._services_stopped = True
        members = list(self.fleet.values()) or [self.services]
        # Every cluster at once: one sick cluster's stop never holds up another's.
        await asyncio.gather(*(self._stop_one(m) for m in members))

    async def _stop_one(self, services: ConsoleServices) -> None:
        try:
            await asyncio.wait_for(services.stop(), self.settings.stop_timeout_s)
        except Exception as exc:  # leaving must never hang or crash on a sick cluster
            self.log.error(f"services.stop failed: {exc!r}")

    def _pull_local_state(self) -> None:
        """What the services already know (no I/O), so the first frame is not empty."""
        reads: list[tuple[str, Callable[[], None]]] = [
            ("snapshot", lambda: self._set_pod_if_any(self.services.snapshot())),
            ("recovery status", lambda: self.state.set_recovery(self.services.recovery_status())),
            ("cadence", lambda: self.state.set_runs(self.services.cadence())),
        ]
        for label, read in reads:
            try:
                read()
            except Exception as exc:
                self.notify(f"Could not read {label}: {exc}", severity="error")

    def _set_pod_if_any(self, snapshot: PodSnapshot) -> None:
        if snapshot.hosts or snapshot.at:
            self.state.set_pod(snapshot)

    def _tick(self) -> None:
        self.state.bump("tick")
        self._sync_screen()

    def _sync_screen(self) -> None:
        try:
            screen = self.screen
        except Exception:  # no screen yet (startup) or already gone (shutdown)
            return
        if isinstance(screen, PhantomScreen):
            screen.sync()
        elif isinstance(screen, HostScreen):
            screen.refresh_host()

    # updates from the services (messages up) ---------------------------------------------

    def on_pod_updated(self, message: PodUpdated) -> None:
        # the newest snapshot the bridge holds (None: this message came another way)
        self.apply_pod(self._pods.take() or message.snapshot)

    def apply_pod(self, snapshot: PodSnapshot) -> None:
        self.state.set_pod(snapshot)
        self._sync_screen()

    def on_recovery_updated(self, message: RecoveryUpdated) -> None:
        self.state.set_recovery(message.status)
        self._sync_screen()

    def on_job_updated(self, message: JobUpdated) -> None:
        self.state.set_job(message.job)
        self._sync_screen()

    def on_cadence_updated(self, message: CadenceUpdated) -> None:
        self.state.set_run(message.run)
        self._sync_screen()

    def on_metrics_updated(self, message: MetricsUpdated) -> None:
        self.state.set_metrics(message.metrics)
        self._sync_screen()

    def on_event_logged(self, message: EventLogged) -> None:
        if self.state.add_events([message.event]):
            self._sync_screen()

    def on_logs_arrived(self, message: LogsArrived) -> None:
        lines = self._inbox.drain()
        if lines:
            self.apply_logs(lines)

    def apply_logs(self, lines: Sequence[LogLine]) -> None:
        self.state.add_lines(lines)
        self._sync_screen()

    def on_log_closed(self, message: LogClosed) -> None:
        # Lines still in the inbox were published before the close: show them first.
        self.on_logs_arrived(LogsArrived())
        self.state.set_closed(message.closed)
        self._sync_screen()

    @work(exclusive=True, group="start", exit_on_error=False)
    async def start_services(self) -> None:
        if self.settings.manage_services:
            # Every cluster of a fleet, side by side: one slow to start delays no other.
            starts = [
                self._call(f"Starting {name}", member.start())
                for name, member in self.fleet.items()
                if self.fleet_state
            ] or [self._call("Starting services", self.services.start())]
            await asyncio.gather(*starts)
        for name in self.fleet_state:
            self._pull_cluster(name)
            self.refresh_cluster(name)
        self._pull_local_state()
        self._sync_screen()
        self.refresh_jobs()
        self.refresh_events()

    def screens(self) -> tuple[str, ...]:
        """The main screens the current cluster has (its capabilities), the Fleet screen
        first in a fleet of several: what the tab line and the footer offer."""
        return screens_of(self.services.capabilities, fleet=len(self.fleet) > 1)

    def check_action(self, action: str, parameters: tuple[object, ...]) -> bool | None:
        """A key is offered only where the cluster can do what it asks (its backend's
        declaration: the command's capability; a screen, where the cluster has it); the
        footer and help follow."""
        if action == "switch_mode" and parameters:
            return str(parameters[0]) in self.screens()
        if action == "next_cluster":
            return len(self.fleet) > 1
        if action != "run" or not parameters:
            return True
        command = by_name(str(parameters[0]))
        return command is not None and command.refusal(self.services.capabilities) is None

    @work(exclusive=True, group="jobs", exit_on_error=False)
    async def refresh_jobs(self) -> None:
        try:
            jobs = await self.services.list_jobs()
        except JobsUnavailable as exc:  # Ray not up yet: a state to show, not an error
            self.state.set_jobs_note(str(exc))
        except Exception as exc:
            self.notify(f"Listing jobs failed: {exc}", title="Jobs", severity="error", timeout=10)
            return
        else:
            self.state.set_jobs(jobs)
            self.state.set_jobs_note("")
        self._sync_screen()

    def action_refresh_jobs(self) -> None:
        self.refresh_jobs()

    @work(exclusive=True, group="events", exit_on_error=False)
    async def refresh_events(self) -> None:
        events = await self._call("Reading the journal", self.services.events(limit=500))
        if events is not None:
            self.state.add_events(events)
            self._sync_screen()

    def action_refresh_events(self) -> None:
        self.refresh_events()

    @work(exclusive=True, group="ledger", exit_on_error=False)
    async def refresh_ledger(self) -> None:
        """Read the journal and the jobs' logs, build the ledger off the event loop
        (``ledger.book.read_book``, as `status --json` does: the advice needs the logs)."""
        now = self.clock()
        if not self.fleet_state:
            book = await self._call("Reading the ledger", read_book(self.services, now=now))
            if book is not None:
                self.state.set_ledger(book)
                self._sync_screen()
            return
        # A fleet of several: every cluster's ledger side by side, for its row and the total;
        # the cluster shown is one of them (its book, with the advice, below the table).
        fleet = await self._call("Reading the ledgers", read_fleet(self.fleet, now=now))
        if fleet is None:
            return
        shown = fleet.books.get(self.services.settings.cluster.name)
        if shown is None:  # its journal could not be read: say why, as a lone cluster does
            shown = await self._call("Reading the ledger", read_book(self.services, now=now))
        if shown is not None:
            self.state.set_ledger(shown, fleet)
            self._sync_screen()

    def action_refresh_ledger(self) -> None:
        self.refresh_ledger()

    async def action_show_ledger(self) -> None:
        await self.switch_mode("ledger")

    def action_refresh_cadence(self) -> None:
        try:
            self.state.set_runs(self.services.cadence())
        except Exception as exc:
            self.notify(f"Reading cadence failed: {exc}", severity="error")
        self._sync_screen()

    def action_refresh_recovery(self) -> None:
        try:
            self.state.set_recovery(self.services.recovery_status())
        except Exception as exc:
            self.notify(f"Reading the watchdog status failed: {exc}", severity="error")
        self._sync_screen()

    # jobs ----------------------------------------------------------------------------------

    def action_submit_form(self) -> None:
        blink = self.settings.cursor_blink
        if Capability.WORKLOADS in self.services.capabilities:  # JobSets, not Ray jobs
            preview = self.services.preview_workload
            new = WorkloadFormScreen(self._last_workload, preview, cursor_blink=blink)
            self.push_screen(new, self._workload_form_done)
            return
        form = SubmitScreen(
            self._last_spec,
            self.dashboard_url(),
            cursor_blink=blink,
            sweep_url=functools.partial(wandb_sweep_url, self.services.settings.wandb),
        )
        self.push_screen(form, self._submit_form_done)

    def _submit_form_done(self, spec: SubmitSpec | None) -> None:
        if spec is not None:
            self._last_spec = spec
            send = functools.partial(self.services.submit, spec, actor="user")
            self.run_new_job("Submit", send, f"Submitted {{}} ({spec.mode}).")

    def _workload_form_done(self, spec: WorkloadSpec | None) -> None:
        if spec is not None:
            self._last_workload = spec  # a refused create reopens with what was typed
            send = functools.partial(self.services.create_workload, spec, actor="user")
            self.run_new_job("New workload", send, f"Created workload {{}} ({spec.template}).")

    # Not exclusive: a second submission must never cancel one still in flight.
    @work(group="submit", exit_on_error=False)
    async def run_new_job(
        self, label: str, send: Callable[[], Awaitable[JobInfo]], done: str
    ) -> None:
        job = await self._call(label, send())
        if job is not None:
            self.state.set_job(job)
            self.notify(done.format(job.job_id), title=label)
            self._sync_screen()

    def open_host(self, name: str) -> None:
        self.push_screen(HostScreen(name))

    def open_log(self, job_id: str) -> None:
        self.push_screen(LogViewScreen(job_id))
        self.open_log_stream(job_id)

    def open_log_stream(self, job_id: str) -> None:
        """(Re)start following a job's log from the start (the stream replays it)."""
        self.state.logs.pop(job_id, None)
        self.state.closed.pop(job_id, None)
        self.state.bump("logs")
        self._following = job_id
        self._follow(job_id)

    def stop_follow(self, job_id: str) -> None:
        if self._following == job_id:
            self._following = None
            self.workers.cancel_group(self, "follow")

    def _is_followed(self, job_id: str) -> bool:
        return job_id == self._following

    @work(exclusive=True, group="follow", exit_on_error=False)
    async def _follow(self, job_id: str) -> None:
        closed: LogStreamClosed | None = None
        try:
            async for item in self.services.follow_logs(job_id):
                if isinstance(item, LogStreamClosed):
                    closed = item
                    break
                if self._inbox.put(item):
                    self.post_message(LogsArrived())
            if closed is None:
                info = await self.services.job_status(job_id)
                closed = LogStreamClosed(job_id, info.status, self.clock())
        except asyncio.CancelledError:
            raise
        except Exception as exc:
            self.notify(f"Log stream of {job_id} failed: {exc}", severity="error")
            job = self.state.jobs.get(job_id)
            closed = LogStreamClosed(job_id, job.status if job else JobStatus.RUNNING, self.clock())
        self.post_message(LogClosed(closed))

    # help ----------------------------------------------------------------------------------

    def action_help(self) -> None:
        self.push_screen(HelpScreen(self.keymap))

    # the fleet: a row per cluster, and which cluster the other screens show -----------------

    def home_mode(self) -> str:
        """The first screen: the Fleet screen in a fleet of several, else the Overview."""
        return FLEET if self.fleet_state else "overview"

    def _pull_cluster(self, name: str) -> None:
        """A cluster's latest as its services hold it (no I/O) into its Fleet row."""
        member, view = self.fleet[name], self.fleet_state[name]
        try:
            snapshot = member.snapshot()
            if snapshot.hosts or snapshot.at:
                view.set_pod(snapshot)
            view.set_recovery(member.recovery_status())
            view.set_runs(member.cadence())
        except Exception as exc:
            self.notify(f"Could not read {name}: {exc}", severity="error")
        self.state.bump("fleet")

    def on_cluster_polled(self, message: ClusterPolled) -> None:
        bridge = self._fleet_bridges.get(message.cluster)
        if bridge is None:
            return
        bridge.answered()  # before reading: an update from now on rings again
        self._pull_cluster(message.cluster)
        self._sync_screen()

    def on_cluster_recorded(self, message: ClusterRecorded) -> None:
        view = self.fleet_state.get(message.cluster)
        if view is None:
            return
        update = message.update
        if isinstance(update, JobInfo):
            view.set_job(update)
        elif not view.add_events([update]):
            return
        self.state.bump("fleet")
        self._sync_screen()

    @work(group="fleet", exit_on_error=False)
    async def refresh_cluster(self, name: str) -> None:
        """A cluster's jobs and journal rows for its Fleet row (its services' reads)."""
        member, view = self.fleet[name], self.fleet_state[name]
        try:
            view.set_jobs(await member.list_jobs())
        except Exception:  # Ray not up yet, or the cluster unreachable: its row says so
            view.set_jobs(())
        try:
            view.add_events(await member.events(limit=500))
        except Exception as exc:
            self.notify(f"Reading {name}'s journal failed: {exc}", severity="error")
        self.state.bump("fleet")
        self._sync_screen()

    def open_cluster(self, name: str) -> None:
        """The Fleet screen's `enter`: ``name``'s screens, the Overview first."""
        self.choose_cluster(name, "overview")

    def choose_cluster(self, name: str | None, mode: str | None = None) -> None:
        """Switch to ``name`` (None: the next one after the cluster shown when this switch
        runs), in a worker: the screens are remade."""
        # Not exclusive: a switch cancelled half way would leave its screens half made; a
        # second press waits for the first (``_switch_lock``) and then moves on from it.
        self.run_worker(self.switch_cluster(name, mode), group="cluster")

    def action_next_cluster(self) -> None:
        if len(self.fleet) > 1:
            self.choose_cluster(None)

    def _after(self, name: str) -> str:
        names = list(self.fleet)
        return names[(names.index(name) + 1) % len(names)] if name in names else names[0]

    async def switch_cluster(self, name: str | None, mode: str | None = None) -> None:
        """Show ``name``'s state on every screen (``mode``: then that screen; default: the
        one showing, where the cluster has it). The screens are made again for it, so no
        table, filter or open log of the cluster before carries over."""
        async with self._switch_lock:
            await self._switch_cluster(
                name or self._after(self.services.settings.cluster.name), mode
            )

    async def _switch_cluster(self, name: str, mode: str | None) -> None:
        member = self.fleet.get(name)
        if member is None:
            self.notify(f"no cluster {name!r}", severity="error")
            return
        target = mode or self.current_mode
        if member is not self.services:
            self._detach_cluster()
            self.services = member
            self.state = ConsoleState(log_ring=self.settings.log_ring)
            self._last_spec = SubmitSpec(runtime_env=dict(member.settings.runtime_env))
            self._last_workload = member.settings.workload
            self._unsubscribe = member.subscribe(self._bridge)
            self._pull_local_state()
            await self._remake_screens(target if target in self.screens() else "overview")
            self.refresh_jobs()
            self.refresh_events()
        elif target != self.current_mode:
            await self.switch_mode(target)
        self.refresh_bindings()

    def _detach_cluster(self) -> None:
        """Leave the current cluster: its stream and reads stop, its bridge is dropped."""
        if self._following is not None:
            self.stop_follow(self._following)
        for group in ("jobs", "events", "ledger", "submit"):
            self.workers.cancel_group(self, group)
        if self._unsubscribe is not None:
            self._unsubscribe()
            self._unsubscribe = None
        self._inbox.drain()
        self._pods.take()

    async def _remake_screens(self, target: str) -> None:
        """Every main screen anew, then ``target`` shown (a mode in use cannot be
        removed: a blank one stands in while they are)."""
        blank = "_switching"
        self.add_mode(blank, Screen)
        await self.switch_mode(blank)
        for mode, screen in self.MODES.items():
            await self.remove_mode(mode)
            self.add_mode(mode, screen)
        await self.switch_mode(target)
        await self.remove_mode(blank)
