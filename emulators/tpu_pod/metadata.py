"""A GCE metadata server per emulated host, on the host's own loopback address.

Every host process finds it through ``GCE_METADATA_HOST`` (and ``GCE_METADATA_IP``,
``GCE_METADATA_ROOT``, which google-auth and gcloud read), so nothing ever falls
back to the link-local default address. As on GCE:

- paths under ``/computeMetadata/v1/``; a request without ``Metadata-Flavor: Google``
  gets 403; answers carry ``Metadata-Flavor: Google`` and an ``ETag``;
- ``instance/preempted`` answers ``FALSE``, then ``TRUE`` from the moment a
  preemption notice is given;
- ``?wait_for_change=true`` long-polls until the value differs from the one at
  request time (or from ``last_etag``), ``timeout_sec`` bounds the wait;
- a directory (``instance/``) lists its entries, ``?recursive=true`` answers JSON.

One aiohttp runner serves every host, and a request is answered from the host whose
address it arrived on. Where the kernel lets a socket be tied to the loopback device
(``SO_BINDTODEVICE`` on ``lo``: Linux 5.7+ unprivileged), that is one listening socket for
every host, bound to the common port of all addresses but taking only what arrives on
``lo`` (nothing from another machine reaches it), and answering only the addresses of hosts
it serves: a 1,024-host pod's metadata costs one file descriptor, not 1,024. Elsewhere each
host is one listening site on its own address.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import logging
import socket
from collections.abc import Callable, Iterable
from typing import Any

from aiohttp import web

log = logging.getLogger("phantom.pod.metadata")

PREFIX = "/computeMetadata/v1"
FLAVOR = {"Metadata-Flavor": "Google"}
MAX_WAIT_S = 3600.0

Tree = dict[str, Any]  # nested dicts; leaves are strings


def _etag(value: str) -> str:
    return hashlib.sha256(value.encode()).hexdigest()[:16]


def _camel(key: str) -> str:
    head, *rest = key.split("-")
    return head + "".join(part.title() for part in rest)


def _as_json(node: Any, raw_keys: bool = False) -> Any:
    if isinstance(node, dict):
        # GCE answers recursive JSON in camelCase; attribute keys are the user's own.
        return {
            (k if raw_keys else _camel(k)): _as_json(v, raw_keys or k == "attributes")
            for k, v in node.items()
        }
    return node


def _render(tree: Tree, path: str, recursive: bool) -> tuple[str, str] | None:
    """(body, content type) for ``path`` in ``tree``, or None if it does not exist."""
    node: Any = tree
    parts = [p for p in path.split("/") if p]
    for part in parts:
        if not isinstance(node, dict) or part not in node:
            return None
        node = node[part]
    if isinstance(node, dict):
        if recursive:
            return json.dumps(_as_json(node, raw_keys=bool(parts) and parts[-1] == "attributes")), (
                "application/json"
            )
        lines = [f"{k}/" if isinstance(v, dict) else k for k, v in node.items()]
        return "".join(line + "\n" for line in lines), "application/text"
    return str(node), "application/text"


def bind_loopback_device(port: int) -> socket.socket | None:
    """A socket for ``port`` on every address of the loopback device (not listening yet),
    or None where the kernel refuses to tie a socket to ``lo``. Raises OSError when
    ``port`` is taken on some loopback address."""
    device = getattr(socket, "SO_BINDTODEVICE", None)
    if device is None:
        return None
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    try:
        sock.setsockopt(socket.SOL_SOCKET, device, b"lo")
    except OSError:
        sock.close()
        return None
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind(("0.0.0.0", port))
    except OSError:
        sock.close()
        raise
    return sock


class MetadataServer:
    """Serves ``tree_for(ip)`` (None: no VM on that address) on every added address."""

    def __init__(self, tree_for: Callable[[str], Tree | None]) -> None:
        self.tree_for = tree_for
        self.port = 0
        self._app = web.Application()
        self._app.router.add_route("GET", "/{tail:.*}", self._handle)
        self._runner = web.AppRunner(self._app, access_log=None, shutdown_timeout=0.5)
        self._sites: dict[str, web.BaseSite] = {}
        self._shared: web.BaseSite | None = None  # one site for every address (see above)
        self._served: set[str] = set()
        # Long-polls waiting for a change, by the address they arrived on: a change to some
        # hosts wakes theirs only (a notice to one host of 1,024 re-reads one tree, not 1,024).
        self._waiters: dict[str, set[asyncio.Future[None]]] = {}

    async def start(self, shared: socket.socket | None = None) -> None:
        """``shared``: a socket from ``bind_loopback_device``, then every host is served on it."""
        await self._runner.setup()
        if shared is not None:
            self._shared = web.SockSite(self._runner, shared, shutdown_timeout=0.5)
            await self._shared.start()

    def serves(self, ip: str) -> bool:
        return ip in self._served if self._shared is not None else ip in self._sites

    async def add(self, ip: str, sock: socket.socket | None = None) -> None:
        """Serve ``ip`` on the common port (``sock``: bound to it already)."""
        if self._shared is not None:
            if sock is not None:
                sock.close()
            self._served.add(ip)
            return
        if ip in self._sites:
            if sock is not None:
                sock.close()
            return
        if sock is None:
            sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            try:
                sock.bind((ip, self.port))
            except OSError:
                sock.close()
                raise
        site = web.SockSite(self._runner, sock, shutdown_timeout=0.5)
        await site.start()
        self._sites[ip] = site

    async def remove(self, ip: str) -> None:
        self._served.discard(ip)
        site = self._sites.pop(ip, None)
        if site is not None:
            await site.stop()

    async def changed(self, ips: Iterable[str] | None = None) -> None:
        """Wake the long-polls of ``ips`` (None: every one) so they re-read their value."""
        if ips is None:
            groups = list(self._waiters.values())
        else:
            groups = [w for ip in ips if (w := self._waiters.get(ip)) is not None]
        for waiters in groups:
            for fut in waiters:
                if not fut.done():
                    fut.set_result(None)

    async def stop(self) -> None:
        await self._runner.cleanup()
        self._sites.clear()
        self._served.clear()
        self._shared = None

    # --- requests ---------------------------------------------------------------

    def _answer(self, ip: str, path: str, recursive: bool) -> tuple[str, str] | None:
        tree = self.tree_for(ip)
        if tree is None:
            return None
        return _render(tree, path, recursive)

    async def _handle(self, request: web.Request) -> web.StreamResponse:
        path = request.path
        if path in ("", "/"):
            # google-auth's "am I on GCE?" ping reads only the response header.
            return web.Response(text="computeMetadata/\n", headers=FLAVOR)
        if request.headers.get("Metadata-Flavor") != "Google":
            return web.Response(
                status=403,
                text='Missing required header "Metadata-Flavor": "Google"\n',
                headers={"Content-Type": "text/plain"},
            )
        if path.rstrip("/") in ("/computeMetadata", PREFIX):
            sub = ""
        elif path.startswith(PREFIX + "/"):
            sub = path[len(PREFIX) + 1 :]
        else:
            return web.Response(status=404, text="Not Found\n", headers=FLAVOR)
        sockname = request.transport.get_extra_info("sockname") if request.transport else None
        ip = sockname[0] if sockname else ""
        if not self.serves(ip):  # the shared socket: an address no host has
            return web.Response(status=404, text="Not Found\n", headers=FLAVOR)
        q = request.query
        recursive = q.get("recursive", "").lower() == "true" or q.get("alt") == "json"
        answer = self._answer(ip, sub, recursive)
        if answer is None:
            return web.Response(status=404, text="Not Found\n", headers=FLAVOR)
        if q.get("wait_for_change", "").lower() == "true":
            answer = await self._wait(ip, sub, recursive, answer, q)
            if answer is None:
                return web.Response(status=503, text="host is gone\n", headers=FLAVOR)
        body, ctype = answer
        return web.Response(
            text=body, headers={**FLAVOR, "ETag": _etag(body), "Content-Type": ctype}
        )

    async def _wait(
        self,
        ip: str,
        sub: str,
        recursive: bool,
        answer: tuple[str, str],
        q: Any,
    ) -> tuple[str, str] | None:
        start_tag = q.get("last_etag") or _etag(answer[0])
        if _etag(answer[0]) != start_tag:
            return answer
        try:
            timeout = min(float(q.get("timeout_sec", MAX_WAIT_S)), MAX_WAIT_S)
        except ValueError:
            timeout = MAX_WAIT_S
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout
        waiters = self._waiters.setdefault(ip, set())
        current: tuple[str, str] | None = answer
        try:
            while loop.time() < deadline:
                fut: asyncio.Future[None] = loop.create_future()
                waiters.add(fut)
                try:
                    async with asyncio.timeout_at(deadline):
                        await fut
                except TimeoutError:
                    pass
                finally:
                    waiters.discard(fut)
                current = self._answer(ip, sub, recursive)
                if current is None or _etag(current[0]) != start_tag:
                    break
        finally:
            if not waiters and self._waiters.get(ip) is waiters:
                del self._waiters[ip]
        return current
