"""/healthz, /livez, /readyz as kube-apiserver answers them (text/plain).

The check names are those a 1.33 API server lists; each is always ``ok`` here (the
emulator has no etcd to lose). ``?verbose`` lists them, ``?exclude=NAME`` marks one
excluded, ``/readyz/NAME`` answers one check."""

from __future__ import annotations

from aiohttp import web

_COMMON = (
    "ping",
    "log",
    "etcd",
    "poststarthook/start-apiserver-admission-initializer",
    "poststarthook/generic-apiserver-start-informers",
    "poststarthook/priority-and-fairness-config-consumer",
    "poststarthook/start-apiextensions-informers",
    "poststarthook/start-apiextensions-controllers",
    "poststarthook/crd-informer-synced",
    "poststarthook/start-system-namespaces-controller",
    "poststarthook/bootstrap-controller",
    "poststarthook/scheduling/bootstrap-system-priority-classes",
    "poststarthook/apiservice-registration-controller",
    "poststarthook/apiservice-status-available-controller",
    "autoregister-completion",
)
CHECKS = {
    "healthz": _COMMON,
    "livez": _COMMON,
    "readyz": (*_COMMON[:3], "etcd-readiness", "informer-sync", *_COMMON[3:], "shutdown"),
}


def answer(request: web.Request, parts: list[str]) -> web.Response | None:
    """The response for a health path, or None when ``parts`` is not one."""
    if not parts or parts[0] not in CHECKS:
        return None
    kind, names = parts[0], CHECKS[parts[0]]
    if len(parts) > 1:
        if "/".join(parts[1:]) not in names:
            return web.Response(status=404, text="404 page not found\n")
        return web.Response(text="ok")
    excluded = set(request.query.getall("exclude", []))
    unknown = sorted(excluded - set(names))
    if "verbose" not in request.query:
        return web.Response(text="ok")
    lines = [f"[+]{n} excluded: ok" if n in excluded else f"[+]{n} ok" for n in names]
    if unknown:
        lines.append(
            f"warn: some health checks cannot be excluded: no matches for {', '.join(repr(u) for u in unknown)}"
        )
    lines.append(f"{kind} check passed")
    return web.Response(text="\n".join(lines) + "\n")
