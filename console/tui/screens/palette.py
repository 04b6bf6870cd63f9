"""Command palette (ctrl+p): the rare actions that do not deserve a key.

Teardown, re-open the tunnel, re-bootstrap one host, open the dashboard URL, and (on the
local emulator) preempt or recreate a host to rehearse a recovery. Destructive ones still
ask to confirm: the palette only starts the same app actions a key would.
"""

from __future__ import annotations

from collections.abc import Callable
from functools import partial
from typing import TYPE_CHECKING, cast

from textual.command import DiscoveryHit, Hit, Hits, Provider

if TYPE_CHECKING:
    from console.tui.app import PhantomApp

Command = tuple[str, str, Callable[[], object]]


class PhantomCommands(Provider):
    @property
    def phantom(self) -> PhantomApp:
        return cast("PhantomApp", self.app)

    def commands(self) -> list[Command]:
        app = self.phantom
        pod = app.state.pod
        hosts = [h.name for h in pod.hosts] if pod else []
        out: list[Command] = [
            (
                "Teardown: ray stop everywhere, close tunnel",
                "Stops Ray on every host and closes the tunnel; VMs stay (asks to confirm)",
                app.request_teardown,
            ),
            ("Re-open tunnel", "Re-open the SSH tunnel to the Ray dashboard", app.run_open_tunnel),
            (
                "Open dashboard URL",
                f"Open {app.dashboard_url()} in a browser (also shown as a notification)",
                app.open_dashboard,
            ),
            ("Recover now", "Run the whole recovery loop (asks to confirm)", app.action_recover),
            (
                "Toggle auto-recovery",
                "Watchdog recovers on its own / only on r",
                app.action_toggle_auto,
            ),
            (
                "Relaunch sweep",
                "Relaunch sweep agents with the same sweep id",
                app.run_relaunch_sweep,
            ),
            ("Refresh pod now", "Poll TPU API, SSH and Ray now", app.action_refresh_pod),
            (
                "Restart Ray",
                "Start the head and join every worker; restarts Ray (asks to confirm)",
                app.request_ray_up,
            ),
            ("Submit job", "Open the submit form", app.action_submit_form),
        ]
        for name in hosts:
            out.append(
                (
                    f"Re-bootstrap host {name}",
                    "Run the bootstrap command again on this host only",
                    partial(app.run_bootstrap, [name]),
                )
            )
        if app.services.config.is_local:
            for name in hosts:
                out.append(
                    (
                        f"Preempt host {name} (emulator)",
                        "Kill the emulated host like a spot reclaim (asks to confirm)",
                        partial(app.request_preempt, name),
                    )
                )
                out.append(
                    (
                        f"Recreate host {name} (emulator)",
                        "Bring the emulated host back, bare (asks to confirm)",
                        partial(app.request_recreate, name),
                    )
                )
        return out

    async def discover(self) -> Hits:
        for title, help_text, callback in self.commands():
            if "host " in title and "Re-bootstrap" not in title:
                continue  # per-host emulator commands appear when searched for
            yield DiscoveryHit(title, callback, help=help_text)

    async def search(self, query: str) -> Hits:
        matcher = self.matcher(query)
        for title, help_text, callback in self.commands():
            score = matcher.match(title)
            if score > 0:
                yield Hit(score, matcher.highlight(title), callback, text=title, help=help_text)
