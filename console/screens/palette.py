"""Command palette (ctrl+p): the rare actions that do not deserve a key.

Its entries are the rows of ``console.services.action_table`` that name the palette, offered
where the cluster's backend can do them (``action_table.offered``): on a TPU VM pod teardown,
the tunnel, re-bootstrap one host, the dashboard URL and (on the local emulator) preempt or
recreate a host; on GKE only what GKE can do. Destructive ones still ask to confirm: the
palette only starts the same app actions a key would.
"""

from __future__ import annotations

from collections.abc import Callable
from functools import partial
from typing import TYPE_CHECKING, cast

from textual.command import DiscoveryHit, Hit, Hits, Provider

from console.services.action_table import Front, offered, on

if TYPE_CHECKING:
    from console.tui.app import PhantomApp

# (title, help, callback, listed before anything is typed)
Command = tuple[str, str, Callable[[], object], bool]


class PhantomCommands(Provider):
    @property
    def phantom(self) -> PhantomApp:
        return cast("PhantomApp", self.app)

    @classmethod
    def handled(cls) -> tuple[str, ...]:
        """The intents the palette offers: the table's palette rows."""
        return tuple(a.tui for a in on(Front.PALETTE) if a.tui)

    def handlers(self) -> dict[str, Callable[[], object] | Callable[[str], object]]:
        """Each intent's handler in the app: whole-cluster ones take nothing, per-host ones
        the host's name. Intents with no handler here live on their screen's keys."""
        app = self.phantom
        return {
            "recover": app.action_recover,
            "toggle_auto": app.action_toggle_auto,
            "refresh_pod": app.action_refresh_pod,
            "submit_form": app.action_submit_form,
            "show_ledger": app.action_show_ledger,
            "bring_up": app.action_bring_up,
            "ray_up": app.ops.request_ray_up,
            "teardown": app.ops.request_teardown,
            "open_tunnel": app.ops.run_open_tunnel,
            "open_dashboard": app.ops.open_dashboard,
            "relaunch_sweep": app.ops.run_relaunch_sweep,
            "bootstrap": lambda host: app.ops.run_bootstrap([host]),
            "preempt": app.ops.request_preempt,
            "recreate": app.ops.request_recreate,
        }

    def commands(self) -> list[Command]:
        """What this cluster can do (``action_table.offered``), as palette entries."""
        app = self.phantom
        pod = app.state.pod
        hosts = [h.name for h in pod.hosts] if pod else []
        handlers = self.handlers()
        out: list[Command] = []
        for action in offered(Front.PALETTE, app.services.capabilities):
            handler = handlers[action.tui or ""]  # a palette row without a handler: a bug
            hint = action.hint or action.description
            if not action.per_host:
                out.append((action.label, hint, cast("Callable[[], object]", handler), True))
                continue
            for name in hosts:  # a destructive per-host command appears when searched for
                label = action.label.replace("host", f"host {name}", 1)
                per_host = cast("Callable[[str], object]", handler)
                out.append((label, hint, partial(per_host, name), not action.confirm))
        return out

    async def discover(self) -> Hits:
        for title, help_text, callback, listed in self.commands():
            if not listed:
                continue
            yield DiscoveryHit(title, callback, help=help_text)

    async def search(self, query: str) -> Hits:
        matcher = self.matcher(query)
        for title, help_text, callback, _ in self.commands():
            score = matcher.match(title)
            if score > 0:
                yield Hit(score, matcher.highlight(title), callback, text=title, help=help_text)
