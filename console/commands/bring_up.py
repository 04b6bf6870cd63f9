"""``bring_up``: the seed's bring-up: bootstrap every worker, Ray head and workers, tunnel."""

from __future__ import annotations

from console.commands.kit.base import Command, Confirm, Effect, Front, Session, Started, relay
from console.commands.kit.params import NoArgs
from console.commands.kit.told import result_text
from console.services.capabilities import Capability
from console.services.model import ActionResult, PodSnapshot


async def run(s: Session, args: NoArgs) -> ActionResult:
    svc = await s.services()
    s.tell("Bringing the cluster up: bootstrap, Ray head and workers, tunnel…")
    res = await svc.bootstrap(None, s.actor)
    if res.ok:
        s.tell(result_text(res))
        s.started.add(Started.RAY)
        res = await svc.ray_up(s.actor)
    if res.ok:
        s.tell(result_text(res))
        res = await svc.open_tunnel(s.actor)
    return relay(res)


def confirm(args: NoArgs, pod: PodSnapshot | None) -> Confirm | None:
    if pod is None or not pod.ray_alive:
        return None
    return Confirm(
        "Bring the cluster up again?",
        f"Ray already has {pod.ray_alive} live node(s): bootstrapping and starting Ray "
        "restarts it, and running jobs stop.",
        "Bring up",
    )


COMMAND = Command(
    "bring_up",
    "Bootstrap every host, start the Ray head, join the workers, open the tunnel",
    NoArgs,
    run,
    Effect.ACTS,
    order=300,
    needs=Capability.VMS,
    fronts=frozenset({Front.TUI}),
    title="Bring up",
    confirm=confirm,
)
