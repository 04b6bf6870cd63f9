"""The cluster DNS records of pods, as a hosts file on the emulated hosts.

A pod with ``hostname`` and ``subdomain`` under a headless Service of that name gets
``<hostname>.<subdomain>[.<ns>[.svc[.cluster.local]]]`` (what kube-dns / Cloud DNS answer
for a JobSet's pods, what a JAX coordinator address uses). The emulator writes them to
``<run_dir>/hosts``; Python in containers resolves them through ``resolver/
sitecustomize.py`` (the kubelet sets PYTHONPATH and PHANTOM_GKE_HOSTS).
"""

from __future__ import annotations

import os
from pathlib import Path

from emulators.gke.store import Obj, Store

RESOLVER_DIR = Path(__file__).with_name("resolver")


def pod_records(store: Store) -> list[tuple[str, list[str]]]:
    out = []
    for pod in store.list("pods"):
        meta, spec, st = pod["metadata"], pod.get("spec") or {}, pod.get("status") or {}
        host, sub, ip = spec.get("hostname"), spec.get("subdomain"), st.get("podIP")
        ns = meta.get("namespace", "default")
        if not (host and sub and ip) or meta.get("deletionTimestamp"):
            continue
        svc: Obj | None = store.get("services", ns, sub)
        if svc is None or (svc.get("spec") or {}).get("clusterIP") != "None":
            continue
        short = f"{host}.{sub}"
        names = [short, f"{short}.{ns}", f"{short}.{ns}.svc", f"{short}.{ns}.svc.cluster.local"]
        out.append((str(ip), names))
    return out


class HostsFile:
    """``<run_dir>/hosts``, rewritten (atomically) when the records change."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._last: str | None = None

    def sync(self, store: Store) -> None:
        lines = ["# pod DNS records of the emulated GKE cluster"]
        lines += [f"{ip}\t{' '.join(names)}" for ip, names in pod_records(store)]
        text = "\n".join(lines) + "\n"
        if text == self._last:
            return
        tmp = self.path.with_suffix(".tmp")
        tmp.write_text(text)
        os.replace(tmp, self.path)
        self._last = text
