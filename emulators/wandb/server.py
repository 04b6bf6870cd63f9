"""The W&B-shaped HTTP server: GraphQL, the run file stream, file uploads, API-key auth.

``python -m emulators.wandb serve`` runs it in the foreground (``client.start`` spawns
it detached). It binds 127.0.0.1 only. The accepted API key arrives in the daemon's
environment (``layout.DAEMON_KEY_ENV``) and is never logged.
"""

from __future__ import annotations

import asyncio
import base64
import binascii
import contextlib
import hmac
import json
import logging
import os
import signal
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from aiohttp import web

from emulators.wandb import gql
from emulators.wandb import layout as L
from emulators.wandb.artifacts import ArtifactError
from emulators.wandb.schema import GraphQLError, Schema
from emulators.wandb.state import State

log = logging.getLogger("phantom.wandb")

# A wrong or missing key: the status and body W&B's API answers with.
_UNAUTHORIZED = {"errors": [{"message": "user is not logged in"}], "data": None}


@dataclass(frozen=True)
class ServerConfig:
    run_dir: Path
    port: int = 0
    crash_after: float = 300.0
    agent_timeout: float = 60.0
    delay: float = 0.0


class WandbServer:
    def __init__(self, cfg: ServerConfig, api_key: str) -> None:
        self.cfg = cfg
        self.layout = L.RunLayout(cfg.run_dir)
        self.state = State.load(self.layout.state_file)
        self.port = cfg.port
        self._key = api_key
        self.schema = Schema(self.state, lambda: self.base_url, cfg.crash_after, cfg.agent_timeout)
        self.requests = 0
        self.started = time.time()
        # Seconds every GraphQL and file-stream answer is held back (POST /_phantom/delay):
        # a slow W&B server, for the clients' deadlines.
        self.delay_s = cfg.delay
        # Set on SIGTERM: answers still held back are let go at once, so a stop is not kept
        # waiting for them (the runner's cleanup waits for every open handler).
        self.stopping = asyncio.Event()

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def app(self) -> web.Application:
        app = web.Application(middlewares=[self._auth], client_max_size=1 << 30)
        app.router.add_post("/graphql", self.graphql)
        app.router.add_post("/files/{entity}/{project}/{run}/file_stream", self.file_stream)
        app.router.add_put("/_storage/{entity}/{project}/{run}/{path:.+}", self.put_file)
        app.router.add_get("/_storage/{entity}/{project}/{run}/{path:.+}", self.get_file)
        app.router.add_put("/_artifacts/{num}/{path:.+}", self.put_artifact_file)
        app.router.add_get("/_artifacts/{num}/{path:.+}", self.get_artifact_file)
        app.router.add_get("/_phantom/status", self.status)
        app.router.add_post("/_phantom/delay", self.set_delay)
        app.router.add_get("/healthz", self.health)
        app.router.add_get("/", self.health)
        # The SDK's own telemetry export (OTLP) goes to the base URL: take it and drop it.
        app.router.add_post("/sdk/otel/{tail:.*}", self.health)
        return app

    def _authorized(self, request: web.Request) -> bool:
        header = request.headers.get("Authorization", "")
        scheme, _, token = header.partition(" ")
        if scheme.lower() != "basic":
            return False
        try:
            user_pass = base64.b64decode(token, validate=True).decode()
        except (binascii.Error, UnicodeDecodeError):
            return False
        _, _, key = user_pass.partition(":")
        return hmac.compare_digest(key.encode(), self._key.encode())

    @web.middleware
    async def _auth(self, request: web.Request, handler: Any) -> web.StreamResponse:
        self.requests += 1
        open_paths = ("/_storage/", "/_artifacts/", "/_phantom/status", "/healthz", "/sdk/otel/")
        guarded = request.path != "/" and not request.path.startswith(open_paths)
        if guarded and not self._authorized(request):
            log.info("401 %s %s (wrong or missing API key)", request.method, request.path)
            return web.json_response(_UNAUTHORIZED, status=401)
        if self.delay_s > 0 and (request.path == "/graphql" or request.path.startswith("/files/")):
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self.stopping.wait(), self.delay_s)
            if self.stopping.is_set():  # its state is saved already: change nothing now
                return web.json_response({"error": "the server is stopping"}, status=503)
        resp: web.StreamResponse = await handler(request)
        return resp

    async def health(self, request: web.Request) -> web.Response:
        return web.json_response({"ok": True})

    def status_json(self) -> dict[str, Any]:
        return {
            "pid": os.getpid(),
            "port": self.port,
            "base_url": self.base_url,
            "run_dir": str(self.layout.run_dir),
            "state_file": str(self.layout.state_file),
            "projects": len(self.state.projects),
            "runs": len(self.state.runs),
            "sweeps": len(self.state.sweeps),
            "agents": len(self.state.agents),
            "requests": self.requests,
            "delay_s": self.delay_s,
        }

    async def status(self, request: web.Request) -> web.Response:
        return web.json_response(self.status_json())

    async def set_delay(self, request: web.Request) -> web.Response:
        """``{"seconds": S}``: hold every later GraphQL and file-stream answer S seconds (0:
        none). Needs the API key, like the API itself."""
        try:
            seconds = float((await request.json())["seconds"])
        except (ValueError, KeyError, TypeError):
            return web.json_response({"error": 'body must be {"seconds": S}'}, status=400)
        if not seconds >= 0:
            return web.json_response({"error": "seconds must be >= 0"}, status=400)
        self.delay_s = seconds
        log.info("answers are now held back %gs", seconds)
        return web.json_response({"delay_s": seconds})

    async def graphql(self, request: web.Request) -> web.Response:
        try:
            body = await request.json()
            doc = gql.parse(str(body.get("query") or ""))
        except (ValueError, gql.GraphQLSyntaxError) as exc:
            return web.json_response({"errors": [{"message": str(exc)}], "data": None}, status=400)
        names = [op.name for op in doc.operations]
        self.schema.changed = False
        root = self.schema.root()
        missing = gql.unknown_roots(doc, root, body.get("operationName"))
        if missing:  # a request this emulator does not serve yet: say so in the log
            log.warning("graphql %s: unknown root fields %s answer null", names, missing)
        try:
            data = gql.execute(doc, root, body.get("variables"), body.get("operationName"))
        except (GraphQLError, ArtifactError) as exc:
            log.info("graphql %s -> %s: %s", names, exc.status, exc)
            return web.json_response(
                {"errors": [{"message": str(exc)}], "data": None}, status=exc.status
            )
        except (KeyError, TypeError, ValueError) as exc:
            log.exception("graphql %s failed", names)
            return web.json_response(
                {"errors": [{"message": f"bad request: {exc}"}], "data": None}, status=400
            )
        log.info("graphql %s", names)
        log.debug("query %s variables %s", body.get("query"), body.get("variables"))
        if self.schema.changed:
            self.state.save()
        return web.json_response({"data": data})

    async def file_stream(self, request: web.Request) -> web.Response:
        m = request.match_info
        run = self.state.run(m["entity"], m["project"], m["run"])
        if run is None:
            return web.json_response({"error": "run not found"}, status=404)
        try:
            body = await request.json()
        except ValueError:
            return web.json_response({"error": "body is not JSON"}, status=400)
        self.state.stream(run, body)
        self.state.save()
        return web.json_response({"exitcode": None, "limits": {}})

    def _storage_path(self, request: web.Request) -> Path:
        m = request.match_info
        rel = Path(m["entity"], m["project"], m["run"], m["path"])
        if ".." in rel.parts:
            raise web.HTTPBadRequest(text="bad path")
        return self.layout.files_dir / rel

    async def put_file(self, request: web.Request) -> web.Response:
        path = self._storage_path(request)
        path.parent.mkdir(parents=True, exist_ok=True)
        data = await request.read()
        await asyncio.to_thread(path.write_bytes, data)
        m = request.match_info
        run = self.state.run(m["entity"], m["project"], m["run"])
        if run is not None:
            run["files"][m["path"]] = {"size": len(data), "updated_at": time.time()}
            self.state.save()
        return web.Response(status=200)

    async def get_file(self, request: web.Request) -> web.StreamResponse:
        path = self._storage_path(request)
        if not path.is_file():
            raise web.HTTPNotFound()
        return web.FileResponse(path)

    def _artifact_path(self, request: web.Request) -> Path:
        m = request.match_info
        rel = Path(m["num"], m["path"])
        if ".." in rel.parts or not m["num"].isdigit():
            raise web.HTTPBadRequest(text="bad path")
        return self.layout.run_dir / "artifacts" / rel

    async def put_artifact_file(self, request: web.Request) -> web.Response:
        path = self._artifact_path(request)
        path.parent.mkdir(parents=True, exist_ok=True)
        data = await request.read()
        await asyncio.to_thread(path.write_bytes, data)
        self.schema.artifacts.stored(
            request.match_info["num"], request.match_info["path"], len(data)
        )
        self.state.save()
        return web.Response(status=200)

    async def get_artifact_file(self, request: web.Request) -> web.StreamResponse:
        path = self._artifact_path(request)
        if not path.is_file():
            raise web.HTTPNotFound()
        return web.FileResponse(path)


async def serve(cfg: ServerConfig, api_key: str) -> None:
    server = WandbServer(cfg, api_key)
    runner = web.AppRunner(server.app(), access_log=None)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", cfg.port)
    await site.start()
    sockets = getattr(site._server, "sockets", None) or []
    server.port = sockets[0].getsockname()[1] if sockets else cfg.port
    layout = server.layout
    layout.pid_file.write_text(str(os.getpid()))
    tmp = layout.info_file.with_suffix(".tmp")
    tmp.write_text(json.dumps(server.status_json()))
    os.replace(tmp, layout.info_file)
    log.info("W&B emulator listening on %s", server.base_url)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    try:
        await stop.wait()
    finally:
        server.stopping.set()
        server.state.save()
        await runner.cleanup()
        with contextlib.suppress(OSError):
            layout.info_file.unlink()
        with contextlib.suppress(OSError):
            layout.pid_file.unlink()


def run_server(cfg: ServerConfig) -> int:
    debug = os.environ.get("PHANTOM_WANDB_LOG") == "debug"  # queries in the log, for study
    logging.basicConfig(
        level=logging.DEBUG if debug else logging.INFO,
        format="%(asctime)s %(levelname)s %(message)s",
    )
    api_key = os.environ.pop(L.DAEMON_KEY_ENV, "")
    if not api_key:
        log.error("error: no API key was handed to the daemon (start it with `up`)")
        return 2
    cfg.run_dir.mkdir(parents=True, exist_ok=True)
    try:
        asyncio.run(serve(cfg, api_key))
    except OSError as exc:
        log.error("error: cannot listen on 127.0.0.1:%s: %s", cfg.port, exc.strerror or exc)
        return 1
    return 0
