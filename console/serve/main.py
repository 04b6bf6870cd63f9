"""`phantom serve [--bind ADDR:PORT] [--token-env NAME]`: the console in a browser.

textual-serve starts one `phantom` (the TUI, with the same ``--config``) per browser tab and
streams its screen over a websocket. Loopback by default. Any other address shows the
console to whoever reaches it, so it takes a token (read from the environment variable
``--token-env`` names, never from the command line, where ``ps`` shows it) and says so on
stderr: the page is opened as ``/?token=...`` once, which sets a cookie the websocket must
carry. Bad input (a port in use, a non-local address without the token) is exit 2 before
anything listens.
"""

from __future__ import annotations

import asyncio
import contextlib
import hmac
import os
import shlex
import signal
import sys
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import TextIO

from aiohttp import web

from console import exit_codes
from console.config.listen import Listen

TOKEN_ENV = "PHANTOM_SERVE_TOKEN"
COOKIE = "phantom_serve_token"
MIN_TOKEN = 16


@dataclass(frozen=True)
class ServeOptions:
    bind: Listen
    token_env: str = TOKEN_ENV
    config_path: str | None = None
    cluster: str | None = None
    """A fleet's cluster every tab opens on (``--cluster``); None: every cluster (a fleet's
    Fleet screen first), or the config's only one."""


def tui_command(config_path: str | None, cluster: str | None = None) -> str:
    """The command each browser tab runs: this Python's `phantom` on the same config (and
    the same cluster of a fleet)."""
    argv = [sys.executable, "-m", "console.cli"]
    if config_path:
        argv += ["--config", os.path.abspath(config_path)]
    if cluster is not None:
        argv += ["--cluster", cluster]
    return shlex.join(argv)


def token_problem(options: ServeOptions, environ: dict[str, str] | os._Environ[str]) -> str:
    """Why this bind may not start (a non-local address needs a token), or ""."""
    token = environ.get(options.token_env, "")
    if options.bind.loopback or len(token) >= MIN_TOKEN:
        return ""
    have = "is not set" if not token else f"is shorter than {MIN_TOKEN} characters"
    return (
        f"phantom serve: --bind {options.bind} is not a loopback address: anyone who reaches "
        f"it gets the console, so it needs a token, and ${options.token_env} {have}. Export "
        f"{options.token_env}=<{MIN_TOKEN}+ random characters> (e.g. `openssl rand -hex 16`) "
        "or bind 127.0.0.1"
    )


def _guard(token: str) -> Callable[..., Awaitable[web.StreamResponse]]:
    """Middleware: with a token, the page needs ?token= once (then a cookie), and the
    websocket and downloads need the cookie."""

    @web.middleware
    async def guard(
        request: web.Request, handler: Callable[[web.Request], Awaitable[web.StreamResponse]]
    ) -> web.StreamResponse:
        if request.path.startswith("/static/"):
            return await handler(request)
        given = request.query.get("token") or request.cookies.get(COOKIE, "")
        if not hmac.compare_digest(given.encode(), token.encode()):
            return web.Response(status=401, text="phantom serve: open /?token=<the token>\n")
        response = await handler(request)
        if "token" in request.query and isinstance(response, web.Response):
            response.set_cookie(COOKIE, token, httponly=True, samesite="Strict")
        return response

    return guard


def serve_main(
    options: ServeOptions,
    *,
    stderr: TextIO | None = None,
    ready: Callable[[int], None] | None = None,
    command: str | None = None,
) -> int:
    err = sys.stderr if stderr is None else stderr
    problem = token_problem(options, os.environ)
    if problem:
        print(problem, file=err)
        return exit_codes.USAGE
    token = os.environ.get(options.token_env, "")
    if not options.bind.loopback:
        print(
            f"phantom serve: warning: serving the console on {options.bind}, beyond this "
            "machine; only a browser with the token gets in",
            file=err,
        )
    cmd = command or tui_command(options.config_path, options.cluster)
    try:
        return asyncio.run(_serve(options.bind, cmd, token, err, ready))
    except KeyboardInterrupt:
        return exit_codes.INTERRUPTED


async def _serve(
    bind: Listen,
    command: str,
    token: str,
    err: TextIO,
    ready: Callable[[int], None] | None,
) -> int:
    from textual_serve.server import Server

    host = f"[{bind.host}]" if ":" in bind.host else bind.host
    server = Server(command, host=bind.host, port=bind.port, title="phantom")
    app = await server._make_app()
    if token:
        app.middlewares.append(_guard(token))
    runner = web.AppRunner(app, access_log=None, handle_signals=False)
    await runner.setup()
    site = web.TCPSite(runner, bind.host, bind.port, reuse_address=False)
    try:
        await site.start()
    except OSError as exc:
        await runner.cleanup()
        print(
            f"phantom serve: --bind {bind}: cannot listen there ({exc.strerror or exc}); "
            "pick a free port",
            file=err,
        )
        return exit_codes.USAGE
    port = _bound_port(site, bind.port)
    # The page builds its websocket URL from this: the port really bound.
    server.public_url = f"http://{host}:{port}"
    print(f"phantom serve: the console on http://{host}:{port}/", file=err, flush=True)
    if ready is not None:
        ready(port)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    try:
        await stop.wait()
    finally:
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.remove_signal_handler(sig)
        # Closing the sessions stops each tab's `phantom` (textual-serve's AppService.stop).
        with contextlib.suppress(Exception):
            await runner.cleanup()
    return exit_codes.OK


def _bound_port(site: web.TCPSite, default: int) -> int:
    server = site._server
    sockets: Sequence[object] = getattr(server, "sockets", None) or ()
    for sock in sockets:
        return int(sock.getsockname()[1])  # type: ignore[attr-defined]
    return default
