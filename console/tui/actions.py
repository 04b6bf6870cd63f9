"""The cluster's actions as the app runs them: recovery, bring-up, Ray, the tunnel and the
emulator's chaos. Each runs off the key handler in a worker; what stops or kills something
asks first; the result (or the error) becomes a notification.

``ClusterActions`` is the app's base: ``PhantomApp`` adds the screens, the services' updates
and the jobs on top, and every intent of ``console.services.capabilities`` that is the
cluster's own lands here.
"""

from __future__ import annotations

import asyncio
import os
import sys
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, TypeVar

from textual import work
from textual.app import App

from console.services.model import ActionResult, HostState
from console.screens.confirm import ConfirmScreen
from console.screens.state import ConsoleState, duration, result_text

if TYPE_CHECKING:
    from console.services.api import ConsoleServices

T = TypeVar("T")


class ClusterActions(App[int]):
    services: ConsoleServices
    state: ConsoleState

    def _sync_screen(self) -> None:
        """Re-render the current screen from ``state`` (the app's own)."""

    # workers: every service call runs off the key handler, errors become notifications --

    async def _call(self, label: str, awaitable: Awaitable[T]) -> T | None:
        try:
            return await awaitable
        except asyncio.CancelledError:
            raise
        except Exception as exc:
            self.notify(f"{label} failed: {exc}", title=label, severity="error", timeout=10)
            return None

    def _report(self, result: ActionResult | None) -> None:
        if result is not None:
            self.notify(result_text(result), severity="information" if result.ok else "error")

    @work(group="action", exit_on_error=False)
    async def run_service_action(
        self, label: str, action: Callable[[], Awaitable[ActionResult]]
    ) -> None:
        """A screen's service action, off the key handler; its result becomes a notification."""
        self._report(await self._call(label, action()))

    # recovery ------------------------------------------------------------------------------

    def action_recover(self) -> None:
        pod = self.state.pod
        lost = [h.name for h in pod.hosts if h.tpu_state != HostState.READY] if pod else []
        body = (
            "Runs detect → recreate preempted VMs → wait READY → bootstrap → Ray head and "
            "workers → tunnel → relaunch jobs/sweep → verify metrics.\n"
            "Ray is restarted on every host: running jobs are resubmitted."
        )
        if lost:
            body = f"Not READY: {', '.join(lost[:8])}{' …' if len(lost) > 8 else ''}.\n" + body
        self.confirm("Run the recovery loop now?", body, "Recover", self.run_recover)

    @work(exclusive=True, group="recover", exit_on_error=False)
    async def run_recover(self) -> None:
        self.notify("Recovery started: follow it on screen 5.", title="Recovery")
        status = await self._call("Recovery", self.services.recover(actor="user"))
        if status is not None:
            self.state.set_recovery(status)
            self._sync_screen()
            ok = status.result == "ok"
            mttr = f" (MTTR {duration(status.mttr_s)})" if status.mttr_s is not None else ""
            self.notify(
                f"Recovery {status.result or 'finished'}{mttr}",
                severity="information" if ok else "error",
            )

    def action_toggle_auto(self) -> None:
        enabled = not self.state.recovery.auto
        try:
            self.services.set_auto_recovery(enabled, actor="user")
            self.state.set_recovery(self.services.recovery_status())
        except Exception as exc:
            self.notify(f"Toggling auto-recovery failed: {exc}", severity="error")
            return
        self.notify(f"Auto-recovery {'on' if enabled else 'off'}.")
        self._sync_screen()

    # pod actions ---------------------------------------------------------------------------

    @work(exclusive=True, group="bootstrap", exit_on_error=False)
    async def run_bootstrap(self, hosts: list[str] | None = None) -> None:
        self.notify(f"Bootstrapping {', '.join(hosts) if hosts else 'every host'}…")
        self._report(await self._call("Bootstrap", self.services.bootstrap(hosts, actor="user")))

    @work(exclusive=True, group="tunnel", exit_on_error=False)
    async def run_open_tunnel(self) -> None:
        self._report(await self._call("Tunnel", self.services.open_tunnel(actor="user")))

    def action_bring_up(self) -> None:
        pod = self.state.pod
        if pod is not None and pod.ray_alive:
            self.confirm(
                "Bring the cluster up again?",
                f"Ray already has {pod.ray_alive} live node(s): bootstrapping and starting Ray "
                "restarts it, and running jobs stop.",
                "Bring up",
                self.run_bring_up,
            )
        else:
            self.run_bring_up()

    @work(exclusive=True, group="ray-up", exit_on_error=False)
    async def run_bring_up(self) -> None:
        """The seed's bring-up: bootstrap every worker, head + workers, tunnel."""
        self.notify("Bringing the cluster up: bootstrap, Ray head and workers, tunnel…")
        for label, step in (
            ("Bootstrap", lambda: self.services.bootstrap(None, actor="user")),
            ("Ray up", lambda: self.services.ray_up(actor="user")),
            ("Tunnel", lambda: self.services.open_tunnel(actor="user")),
        ):
            result = await self._call(label, step())
            self._report(result)
            if result is None or not result.ok:
                return

    def request_ray_up(self) -> None:
        self.confirm(
            "Restart Ray on the pod?",
            "Starts the head and joins every worker; a running Ray is restarted and its jobs stop.",
            "Restart Ray",
            self.run_ray_up,
        )

    @work(exclusive=True, group="ray-up", exit_on_error=False)
    async def run_ray_up(self) -> None:
        self._report(await self._call("Ray up", self.services.ray_up(actor="user")))

    def request_teardown(self) -> None:
        self.confirm(
            "Tear down Ray?",
            "Runs `ray stop -f` on every host and closes the tunnel. Running jobs stop. "
            "The VMs are left alone.",
            "Tear down",
            self.run_teardown,
        )

    @work(exclusive=True, group="teardown", exit_on_error=False)
    async def run_teardown(self) -> None:
        self._report(await self._call("Teardown", self.services.teardown(actor="user")))

    def request_preempt(self, host: str) -> None:
        self.confirm(
            f"Preempt {host}?",
            "Emulator: kills every process of this host like a spot reclaim.",
            "Preempt",
            lambda: self.run_preempt(host),
        )

    @work(exclusive=True, group="preempt", exit_on_error=False)
    async def run_preempt(self, host: str) -> None:
        self._report(await self._call("Preempt", self.services.preempt(host, actor="user")))

    def request_recreate(self, host: str) -> None:
        self.confirm(
            f"Recreate {host}?",
            "Emulator: deletes the host and brings it back bare (new host key).",
            "Recreate",
            lambda: self.run_recreate(host),
        )

    @work(exclusive=True, group="recreate", exit_on_error=False)
    async def run_recreate(self, host: str) -> None:
        self._report(await self._call("Recreate", self.services.recreate(host, actor="user")))

    @work(exclusive=True, group="sweep", exit_on_error=False)
    async def run_relaunch_sweep(self) -> None:
        job = await self._call("Relaunch sweep", self.services.relaunch_sweep(actor="user"))
        if job is not None:
            self.state.set_job(job)
            self.notify(f"Sweep relaunched as {job.job_id}.")
            self._sync_screen()

    def dashboard_url(self) -> str:
        pod = self.state.pod
        if pod is not None and pod.dashboard_url:
            return pod.dashboard_url
        return f"http://127.0.0.1:{self.services.config.ray.local_dashboard_port}"

    def open_dashboard(self) -> None:
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

    def confirm(self, title: str, body: str, label: str, then: Callable[[], object]) -> None:
        def done(ok: bool | None) -> None:
            if ok:
                then()

        self.push_screen(ConfirmScreen(title, body, label), done)
