"""The cluster's operations as the TUI runs them: recovery, bring-up, Ray, the tunnel and the
emulator's chaos. ``PhantomApp`` holds one ``ClusterOps`` (``app.ops``) and its keys, palette
and dialogs call it; it is not the app's base class. Each service call runs in one of the
app's workers, off the key handler; what stops or kills something asks first; the result (or
the error) becomes a notification.

Which of these a cluster offers is the action table's (``console.services.action_table``);
what each one does to the cluster is the services' (``console.services.actions``).
"""

from __future__ import annotations

import os
import sys
from collections.abc import Awaitable, Callable, Coroutine
from typing import TYPE_CHECKING, Any

from console.screens.state import duration
from console.services.model import HostState

if TYPE_CHECKING:
    from textual.worker import Worker

    from console.tui.app import PhantomApp


class ClusterOps:
    def __init__(self, app: PhantomApp) -> None:
        self.app = app

    def _work(self, coro: Coroutine[Any, Any, None], group: str) -> Worker[None]:
        """One of the app's workers, one per group at a time (a newer replaces the older)."""
        return self.app.run_worker(coro, group=group, exclusive=True, exit_on_error=False)

    # recovery ------------------------------------------------------------------------------

    def request_recover(self) -> None:
        pod = self.app.state.pod
        lost = [h.name for h in pod.hosts if h.tpu_state != HostState.READY] if pod else []
        body = (
            "Runs detect → recreate preempted VMs → wait READY → bootstrap → Ray head and "
            "workers → tunnel → relaunch jobs/sweep → verify metrics.\n"
            "Ray is restarted on every host: running jobs are resubmitted."
        )
        if lost:
            body = f"Not READY: {', '.join(lost[:8])}{' …' if len(lost) > 8 else ''}.\n" + body
        self.app.confirm("Run the recovery loop now?", body, "Recover", self.run_recover)

    def run_recover(self) -> Worker[None]:
        return self._work(self._recover(), "recover")

    async def _recover(self) -> None:
        app = self.app
        app.notify("Recovery started: follow it on screen 5.", title="Recovery")
        status = await app._call("Recovery", app.services.recover(actor="user"))
        if status is not None:
            app.state.set_recovery(status)
            app._sync_screen()
            mttr = f" (MTTR {duration(status.mttr_s)})" if status.mttr_s is not None else ""
            app.notify(
                f"Recovery {status.result_text or 'finished'}{mttr}",
                severity="information" if status.ok else "error",
            )

    def toggle_auto(self) -> None:
        app = self.app
        enabled = not app.state.recovery.auto
        try:
            app.services.set_auto_recovery(enabled, actor="user")
            app.state.set_recovery(app.services.recovery_status())
        except Exception as exc:
            app.notify(f"Toggling auto-recovery failed: {exc}", severity="error")
            return
        app.notify(f"Auto-recovery {'on' if enabled else 'off'}.")
        app._sync_screen()

    # pod actions ---------------------------------------------------------------------------

    def run_bootstrap(self, hosts: list[str] | None = None) -> Worker[None]:
        return self._work(self._bootstrap(hosts), "bootstrap")

    async def _bootstrap(self, hosts: list[str] | None) -> None:
        app = self.app
        app.notify(f"Bootstrapping {', '.join(hosts) if hosts else 'every host'}…")
        app._report(await app._call("Bootstrap", app.services.bootstrap(hosts, actor="user")))

    def run_open_tunnel(self) -> Worker[None]:
        return self._step("Tunnel", lambda: self.app.services.open_tunnel(actor="user"), "tunnel")

    def request_bring_up(self) -> None:
        pod = self.app.state.pod
        if pod is not None and pod.ray_alive:
            self.app.confirm(
                "Bring the cluster up again?",
                f"Ray already has {pod.ray_alive} live node(s): bootstrapping and starting Ray "
                "restarts it, and running jobs stop.",
                "Bring up",
                self.run_bring_up,
            )
        else:
            self.run_bring_up()

    def run_bring_up(self) -> Worker[None]:
        return self._work(self._bring_up(), "ray-up")

    async def _bring_up(self) -> None:
        """The seed's bring-up: bootstrap every worker, head + workers, tunnel."""
        app = self.app
        app.notify("Bringing the cluster up: bootstrap, Ray head and workers, tunnel…")
        for label, step in (
            ("Bootstrap", lambda: app.services.bootstrap(None, actor="user")),
            ("Ray up", lambda: app.services.ray_up(actor="user")),
            ("Tunnel", lambda: app.services.open_tunnel(actor="user")),
        ):
            result = await app._call(label, step())
            app._report(result)
            if result is None or not result.ok:
                return

    def request_ray_up(self) -> None:
        self.app.confirm(
            "Restart Ray on the pod?",
            "Starts the head and joins every worker; a running Ray is restarted and its jobs stop.",
            "Restart Ray",
            self.run_ray_up,
        )

    def run_ray_up(self) -> Worker[None]:
        return self._step("Ray up", lambda: self.app.services.ray_up(actor="user"), "ray-up")

    def request_teardown(self) -> None:
        self.app.confirm(
            "Tear down Ray?",
            "Runs `ray stop -f` on every host and closes the tunnel. Running jobs stop. "
            "The VMs are left alone.",
            "Tear down",
            self.run_teardown,
        )

    def run_teardown(self) -> Worker[None]:
        return self._step("Teardown", lambda: self.app.services.teardown(actor="user"), "teardown")

    def request_preempt(self, host: str) -> None:
        self.app.confirm(
            f"Preempt {host}?",
            "Emulator: kills every process of this host like a spot reclaim.",
            "Preempt",
            lambda: self.run_preempt(host),
        )

    def run_preempt(self, host: str) -> Worker[None]:
        return self._step(
            "Preempt", lambda: self.app.services.preempt(host, actor="user"), "preempt"
        )

    def request_recreate(self, host: str) -> None:
        self.app.confirm(
            f"Recreate {host}?",
            "Emulator: deletes the host and brings it back bare (new host key).",
            "Recreate",
            lambda: self.run_recreate(host),
        )

    def run_recreate(self, host: str) -> Worker[None]:
        services = self.app.services
        return self._step("Recreate", lambda: services.recreate(host, actor="user"), "recreate")

    def _step(self, label: str, call: Callable[[], Awaitable[Any]], group: str) -> Worker[None]:
        async def step() -> None:
            self.app._report(await self.app._call(label, call()))

        return self._work(step(), group)

    def run_relaunch_sweep(self) -> Worker[None]:
        return self._work(self._relaunch_sweep(), "sweep")

    async def _relaunch_sweep(self) -> None:
        app = self.app
        job = await app._call("Relaunch sweep", app.services.relaunch_sweep(actor="user"))
        if job is not None:
            app.state.set_job(job)
            app.notify(f"Sweep relaunched as {job.job_id}.")
            app._sync_screen()

    def open_dashboard(self) -> None:
        url = self.app.dashboard_url()
        # Only hand the URL to a browser when there is a desktop: in a bare tmux/ssh session
        # `webbrowser` may start a text browser on this very terminal.
        if (
            sys.platform == "darwin"
            or os.environ.get("DISPLAY")
            or os.environ.get("WAYLAND_DISPLAY")
        ):
            self.app.open_url(url)
        self.app.notify(url, title="Ray dashboard", timeout=15)
