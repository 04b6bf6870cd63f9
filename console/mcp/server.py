"""`phantom mcp`: the MCP server itself (the SDK's low-level ``Server``).

    mcp_main(config, McpOptions(policy, http)) -> exit code

Over stdio the server ends when the agent host closes its stdin, or on SIGTERM or SIGINT
(services stopped, exit 0). Over streamable HTTP
(``--http ADDR:PORT``, loopback only, port 0 picks a free one) it binds before anything else
is built (an address in use is exit 2, nothing started), says
``phantom mcp: listening on http://ADDR:PORT/mcp`` on stderr once it accepts connections,
and SIGTERM or SIGINT stop it cleanly: sessions closed, services stopped, exit 0.

Tools are the commands the server offers and resources the commands that stand as documents
(``Calls``, ``documents``); a refused or failed call is a tool result with
``isError`` naming the problem, never a protocol error and never the end of the server.
Every response is scrubbed of the secrets the config names (W&B key, HF token, alert
tokens): their values never leave, only their variables' names.

Over a ``[[clusters]]`` fleet the server drives every cluster (`phantom --cluster NAME mcp`:
that one); tools take ``cluster`` (``Calls``) and so do the resources: ``phantom://status``
reads every cluster, ``phantom://status?cluster=NAME`` one (the templates
``phantom://status{?cluster}`` say so). A call's answer names the cluster it ran on.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import signal
import socket
import sys
import urllib.parse
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, TextIO, cast

import mcp_types as types
from mcp.server import Server, ServerRequestContext
from mcp.server.stdio import stdio_server
from mcp.server.transport_security import TransportSecuritySettings
from mcp.shared.exceptions import MCPError

from console import exit_codes
from console.commands import Effect
from console.commands.kit.bind import BadArgument
from console.config import Config, ConfigError
from console.config.fleet import Fleet
from console.config.listen import Listen
from console.mcp.calls import Calls, Document, documents
from console.mcp.policy import Policy
from console.mcp.stdin import stdin_lines
from console.secrets import Scrubber

if TYPE_CHECKING:
    from console.services.api import ConsoleServices

ServicesFactory = Callable[[Config], "ConsoleServices"]

PROMPTS: dict[str, tuple[str, str]] = {
    "diagnose-stalled-run": (
        "Find out why a training run stopped logging metrics, without changing anything",
        "A training run on the Phantom Console's cluster looks stalled{run}. Diagnose it "
        "without changing anything: call `status` (hosts, Ray, jobs, cadence: a run is "
        "stalled when it has logged nothing for k times its usual interval), then `events` "
        "(kind stalled, preempted, host_lost, ray_node_down) and `incidents`, then `logs` "
        "and `search_logs` of the run's job (look for Traceback, OOM, NaN, a checkpoint "
        "that never finished). Say what stopped, since when, on which host, and which "
        "action would fix it (recover, relaunch_sweep, stop_job) - but do not run it; "
        "the operator decides.",
    ),
    "recover-after-preemption": (
        "Bring the cluster and its jobs back after a spot preemption",
        "A spot preemption hit the Phantom Console's cluster{run}. Read `status` and "
        "`incidents` to see what was lost (hosts not READY, Ray nodes down, jobs LOST or "
        "PREEMPTED). If a recovery is already running, wait for it (read `status` again) "
        "rather than starting a second. Otherwise call `recover` (the whole loop: recreate, "
        "wait READY, bootstrap, Ray, tunnel, resubmit, verify metrics); it needs the "
        "operator's `--allow recover`, and a refusal says so. Then confirm from `events` "
        "that the incident ended recovered and from `status` that cadence resumed.",
    ),
}


@dataclass(frozen=True)
class McpOptions:
    policy: Policy = field(default_factory=Policy)
    http: Listen | None = None  # None: stdio


def _text(scrub: Scrubber, obj: Any) -> str:
    return scrub.text(json.dumps(scrub.data(obj), default=str, sort_keys=True))


def build_server(calls: Calls) -> Server[Any]:
    scrub = calls.scrub

    async def list_tools(
        ctx: ServerRequestContext[Any], params: types.PaginatedRequestParams | None
    ) -> types.ListToolsResult:
        tools = [
            types.Tool(
                name=a.name,
                description=a.summary
                + ("" if not a.acts else f" [{a.effect}; {calls.policy.refusal(a) or 'allowed'}]"),
                input_schema=a.input_schema(),
                annotations=types.ToolAnnotations(
                    read_only_hint=not a.acts,
                    destructive_hint=a.effect is Effect.DESTROYS,
                ),
            )
            for a in calls.tools()
        ]
        return types.ListToolsResult(tools=tools)

    async def call_tool(
        ctx: ServerRequestContext[Any], params: types.CallToolRequestParams
    ) -> types.CallToolResult:
        answer = await calls.answer(params.name, params.arguments)
        outcome = answer.result
        named = {} if answer.cluster is None else {"cluster": answer.cluster}
        body = {
            **named,
            "tool": outcome.action,
            "outcome": str(outcome.verdict),
            "reason": str(outcome.reason),
            "message": outcome.message,
            "result": dict(outcome.data),
        }
        text = _text(scrub, body)
        return types.CallToolResult(
            content=[types.TextContent(text=text)],
            structured_content=json.loads(text),
            is_error=not outcome.ok,
        )

    async def list_resources(
        ctx: ServerRequestContext[Any], params: types.PaginatedRequestParams | None
    ) -> types.ListResourcesResult:
        return types.ListResourcesResult(
            resources=[
                types.Resource(
                    uri=d.uri, name=d.name, description=d.description, mime_type="application/json"
                )
                for d in documents()
            ]
        )

    async def list_resource_templates(
        ctx: ServerRequestContext[Any], params: types.PaginatedRequestParams | None
    ) -> types.ListResourceTemplatesResult:
        return types.ListResourceTemplatesResult(
            resource_templates=[
                types.ResourceTemplate(
                    uri_template=d.uri + "{?cluster}",
                    name=f"{d.name} of one cluster",
                    description=f"{d.description} (one cluster of the fleet: "
                    f"{', '.join(calls.names)})",
                    mime_type="application/json",
                )
                for d in documents()
            ]
        )

    async def read_resource(
        ctx: ServerRequestContext[Any], params: types.ReadResourceRequestParams
    ) -> types.ReadResourceResult:
        uri = str(params.uri)
        document, cluster = _resource(uri)
        try:
            body = await calls.read(document, cluster)
        except BadArgument as exc:
            raise MCPError(types.INVALID_PARAMS, f"{uri}: {exc}") from None
        return types.ReadResourceResult(
            contents=[
                types.TextResourceContents(
                    uri=uri, mime_type="application/json", text=_text(scrub, body)
                )
            ]
        )

    async def list_prompts(
        ctx: ServerRequestContext[Any], params: types.PaginatedRequestParams | None
    ) -> types.ListPromptsResult:
        arg = types.PromptArgument(name="run", description="the run or job id", required=False)
        return types.ListPromptsResult(
            prompts=[
                types.Prompt(name=name, description=desc, arguments=[arg])
                for name, (desc, _) in PROMPTS.items()
            ]
        )

    async def get_prompt(
        ctx: ServerRequestContext[Any], params: types.GetPromptRequestParams
    ) -> types.GetPromptResult:
        found = PROMPTS.get(params.name)
        if found is None:
            raise MCPError(
                types.INVALID_PARAMS,
                f"unknown prompt {params.name!r}; prompts: {', '.join(PROMPTS)}",
            )
        desc, text = found
        run = (params.arguments or {}).get("run", "")
        body = text.format(run=f" (run {run})" if run else "")
        return types.GetPromptResult(
            description=desc,
            messages=[
                types.PromptMessage(role="user", content=types.TextContent(text=scrub.text(body)))
            ],
        )

    return Server(
        "phantom",
        version="1",
        instructions=(
            "Phantom Console: a spot TPU pod (or GKE) and its RL training jobs. Read freely "
            "(status, events, incidents, logs, search_logs, ledger); acting tools run only "
            f"where the operator allowed them ({calls.policy.describe()}); a refusal says how. "
            f"Clusters: {', '.join(calls.names)}"
            + (
                "; every tool takes `cluster`: a read without it reads every cluster, an "
                "acting tool needs it"
                if len(calls.names) > 1
                else ""
            )
            + "."
        ),
        on_list_tools=list_tools,
        on_call_tool=call_tool,
        on_list_resources=list_resources,
        on_list_resource_templates=list_resource_templates,
        on_read_resource=read_resource,
        on_list_prompts=list_prompts,
        on_get_prompt=get_prompt,
    )


def _resource(uri: str) -> tuple[Document, str | None]:
    """The document ``uri`` names and its ``?cluster=NAME`` (None: every cluster); an
    unknown one is the agent's error, naming the resources."""
    base, _, query = uri.partition("?")
    document = next((d for d in documents() if d.uri == base), None)
    fields = urllib.parse.parse_qs(query, keep_blank_values=True) if query else {}
    if document is None or set(fields) - {"cluster"} or len(fields.get("cluster", [""])) > 1:
        known = ", ".join(d.uri for d in documents())
        raise MCPError(
            types.INVALID_PARAMS,
            f"unknown resource {uri!r}; resources: {known} (each takes ?cluster=NAME)",
        )
    cluster = fields.get("cluster", [None])[0]
    return document, cluster


def mcp_main(
    config: Config | Fleet,
    options: McpOptions,
    *,
    services_factory: ServicesFactory | None = None,
    stderr: TextIO | None = None,
) -> int:
    err = sys.stderr if stderr is None else stderr
    sock: socket.socket | None = None
    if options.http is not None:
        if not options.http.loopback:
            print(
                f"phantom mcp: --http {options.http}: only loopback (127.0.0.1, ::1); the tools "
                "act on the cluster and an agent elsewhere should use stdio over ssh",
                file=err,
            )
            return exit_codes.USAGE
        try:
            sock = _bind(options.http)
        except OSError as exc:
            print(
                f"phantom mcp: --http {options.http}: cannot listen there "
                f"({exc.strerror or exc}); pick another port, or 0 for a free one",
                file=err,
            )
            return exit_codes.USAGE
    fleet = config if isinstance(config, Fleet) else Fleet((config,), config.source)
    scrub = Scrubber(
        [
            secret
            for c in fleet.members
            for secret in (c.wandb.api_key_env, c.gke.hf_token_env, *c.alerts.secret_envs)
        ]
    )
    try:
        return asyncio.run(_serve(fleet, options, services_factory, scrub, err, sock))
    except KeyboardInterrupt:
        return exit_codes.INTERRUPTED
    finally:
        if sock is not None:
            sock.close()


async def _serve(
    fleet: Fleet,
    options: McpOptions,
    factory: ServicesFactory | None,
    scrub: Scrubber,
    err: TextIO,
    sock: socket.socket | None,
) -> int:
    clusters: dict[str, ConsoleServices] = {}
    try:
        if factory is None:
            from console.wiring import services_factory

            factory = services_factory()
        for config in fleet.members:
            clusters[config.name] = factory(config)
    except ConfigError as exc:
        _close(clusters.values())
        print(exc.render(), file=err)
        return exit_codes.USAGE
    except Exception as exc:  # the factory names what is missing (no pod, bad key...)
        _close(clusters.values())
        which = "" if len(fleet.members) == 1 else f" {fleet.members[len(clusters)].name!r}"
        print(f"phantom mcp: cannot reach the cluster{which}: {scrub.text(str(exc))}", file=err)
        return exit_codes.FAILED
    started: list[ConsoleServices] = []
    try:
        for services in clusters.values():
            started.append(services)
            await services.start()
        server = build_server(Calls(clusters, options.policy, scrub, source=fleet.source))
        serving = ", ".join(c.name if c.state_dir else c.cluster.node_name for c in fleet.members)
        print(f"phantom mcp: serving {serving}; {options.policy.describe()}", file=err)
        if sock is None:
            await _serve_stdio(server)
        else:
            await _serve_http(server, sock, err)
    finally:
        for services in started:
            await services.stop()
        _close(clusters.values())
    print("phantom mcp: stopped", file=err, flush=True)  # the services too
    return exit_codes.OK


def _close(clusters: Iterable[ConsoleServices]) -> None:
    """Each cluster's journal closed (what the services opened when built)."""
    for services in clusters:
        close = getattr(services, "close_journal", None)
        if callable(close):
            close()


async def _serve_stdio(server: Server[Any]) -> None:
    """The session on stdin/stdout until the agent host closes stdin, or SIGTERM/SIGINT
    (an agent host stopping its servers sends SIGTERM): the session is cancelled and the
    caller stops the services, as over HTTP. Without these handlers the signal's default
    ended the process on the spot, its recovery, pollers and tunnel never stopped. stdin is
    read by the loop (``stdin_lines``), so cancelling the session does not wait for the
    agent's next line."""
    loop = asyncio.get_running_loop()
    stop = asyncio.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)

    async def session() -> None:
        async with (
            stdin_lines() as lines,
            stdio_server(stdin=cast("Any", lines)) as (read, write),
        ):
            await server.run(read, write, server.create_initialization_options())

    try:
        serving = asyncio.create_task(session())
        stopping = asyncio.create_task(stop.wait())
        await asyncio.wait({serving, stopping}, return_when=asyncio.FIRST_COMPLETED)
        stopping.cancel()
        if not serving.done():
            serving.cancel()  # the whole session, its stdin reader included
        with contextlib.suppress(asyncio.CancelledError):
            await serving
    finally:
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.remove_signal_handler(sig)


def _bind(listen: Listen) -> socket.socket:
    """The listening socket, bound before the services are built: a port in use is a usage
    error with nothing started, and connections made once it listens wait in its backlog."""
    family = socket.AF_INET6 if ":" in listen.host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind((listen.host, listen.port))
        sock.listen(128)
    except OSError:
        sock.close()
        raise
    return sock


def _url_host(host: str) -> str:
    return f"[{host}]" if ":" in host else host


def _rebinding_guard(host: str) -> TransportSecuritySettings:
    """Only requests naming a loopback host (the bound one included: the SDK's own default
    covers 127.0.0.1, localhost and ::1 only, and no guard at all for 127.0.0.2) and no
    foreign Origin: a web page cannot reach the tools through DNS rebinding."""
    hosts = sorted({_url_host(host), "127.0.0.1", "localhost", "[::1]"})
    return TransportSecuritySettings(
        enable_dns_rebinding_protection=True,
        allowed_hosts=[f"{h}:*" for h in hosts],
        allowed_origins=[f"http://{h}:*" for h in hosts],
    )


async def _serve_http(server: Server[Any], sock: socket.socket, err: TextIO) -> None:
    """Uvicorn on the bound socket until SIGTERM/SIGINT. The sessions end first (leaving
    ``session_manager.run()`` cancels them, and with them an agent's open event stream),
    then uvicorn stops: it waits for open connections, which by then have ended."""
    import uvicorn

    class Web(uvicorn.Server):
        @contextlib.contextmanager
        def capture_signals(self) -> Iterator[None]:
            # Uvicorn's own handlers re-raise the signal once it has stopped, which would
            # kill this process before the services stop; ours below only ask it to stop.
            yield

    host, port = sock.getsockname()[:2]
    app = server.streamable_http_app(host=host, transport_security=_rebinding_guard(host))
    # lifespan off: the session manager's run() (the app's lifespan) is ours to leave first.
    web = Web(uvicorn.Config(app, log_level="warning", lifespan="off", timeout_graceful_shutdown=5))
    loop = asyncio.get_running_loop()
    stop = asyncio.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    try:
        async with server.session_manager.run():
            serving = asyncio.create_task(web.serve(sockets=[sock]))
            print(
                f"phantom mcp: listening on http://{_url_host(host)}:{port}/mcp",
                file=err,
                flush=True,
            )
            stopping = asyncio.create_task(stop.wait())
            await asyncio.wait({serving, stopping}, return_when=asyncio.FIRST_COMPLETED)
            stopping.cancel()
        web.should_exit = True
        await serving
    finally:
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.remove_signal_handler(sig)
