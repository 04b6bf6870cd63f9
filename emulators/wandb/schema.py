"""The GraphQL answers: root fields of Query and Mutation as plain data for ``gql.execute``.

Every object is a dict whose keys are GraphQL field names; a value that takes arguments
(``run(name:)``, ``runs(filters:, first:, after:)``, ``sampledHistory(specs:)``) is a
function of them. Field names and shapes follow the queries the SDK and wandb-core send
(see README.md for where each one was read).
"""

from __future__ import annotations

import fnmatch
import json
import mimetypes
import time
from collections.abc import Callable
from typing import Any

from emulators.wandb import layout as L
from emulators.wandb import runquery as Q
from emulators.wandb import sweeps as S
from emulators.wandb.artifacts import Artifacts
from emulators.wandb.state import Record, State, decode_id, iso, node_id

Obj = dict[str, Any]


class GraphQLError(Exception):
    """Reported in the response's ``errors`` (with HTTP 200 unless ``status`` says)."""

    def __init__(self, message: str, status: int = 200) -> None:
        super().__init__(message)
        self.status = status


def _connection(nodes: list[Obj], args: dict[str, Any]) -> Obj:
    start = int(args.get("after") or 0) if str(args.get("after") or "0").isdigit() else 0
    first = args.get("first")
    page = nodes[start : start + first] if first else nodes[start:]
    end = start + len(page)
    return {
        "edges": [{"node": n, "cursor": str(start + i + 1)} for i, n in enumerate(page)],
        "pageInfo": {
            "__typename": "PageInfo",
            "endCursor": str(end),
            "hasNextPage": end < len(nodes),
        },
        "totalCount": len(nodes),
    }


def _history_keys(run: Record) -> Obj:
    keys: dict[str, Obj] = {}
    for line in run["history"]:
        for k, v in json.loads(line).items():
            keys.setdefault(k, {"typeCounts": [{"type": type(v).__name__, "count": 0}]})
            keys[k]["typeCounts"][0]["count"] += 1
    return {"keys": keys, "lastStep": len(run["history"]) - 1}


def _sampled(run: Record, specs: list[str] | str) -> list[list[Obj]]:
    out = []
    if isinstance(specs, str):  # GraphQL coerces one value to a list of one
        specs = [specs]
    for spec_text in specs:
        spec = json.loads(spec_text)
        keys = spec.get("keys") or []
        rows = [json.loads(line) for line in run["history"]]
        # wandb-core's scan pages ask [minStep, maxStep], both ends included
        lo, hi = spec.get("minStep"), spec.get("maxStep")
        if lo is not None or hi is not None:
            rows = [
                r
                for r in rows
                if (lo is None or r.get("_step", 0) >= lo)
                and (hi is None or r.get("_step", 0) <= hi)
            ]
        if keys:
            rows = [{k: r[k] for k in keys if k in r} for r in rows if all(k in r for k in keys)]
        samples = int(spec.get("samples") or 500)
        if len(rows) > samples:
            stride = len(rows) / samples
            rows = [rows[int(i * stride)] for i in range(samples)]
        out.append(rows)
    return out


def _tail(lines: list[str], n: int = 10) -> str:
    return json.dumps(lines[-n:])


class Schema:
    def __init__(
        self,
        state: State,
        base_url: Callable[[], str],
        crash_after: float = 300.0,
        agent_timeout: float = 60.0,
    ) -> None:
        self.state = state
        self.base_url = base_url
        self.crash_after = crash_after  # a running run this long without a heartbeat crashed
        self.agent_timeout = agent_timeout
        self.artifacts = Artifacts(state, base_url)
        self.changed = False

    # objects ---------------------------------------------------------------------------

    def user(self) -> Obj:
        return {
            "__typename": "User",
            "id": node_id("User", L.USER),
            "name": L.USER,
            "username": L.USER,
            "entity": L.USER,
            "email": f"{L.USER}@localhost",
            "admin": False,
            "flags": "{}",
            "deletedAt": None,
            "apiKeys": {"edges": []},
            "teams": {"edges": [{"node": {"name": L.USER}}]},
            "defaultEntity": lambda a: self.entity({"name": L.USER}),
            "userEntity": lambda a: self.entity({"name": L.USER}),
            "photoUrl": None,
            "defaultFramework": None,
        }

    def entity(self, args: dict[str, Any]) -> Obj:
        name = args.get("name") or L.USER
        return {
            "__typename": "Entity",
            "id": node_id("Entity", name),
            "name": name,
            "isTeam": False,
            "defaultAccess": "PRIVATE",
            "organization": None,
            "projects": lambda a: _connection(
                [self.project_obj(p) for p in self.state.projects.values() if p["entity"] == name],
                a,
            ),
        }

    def project_obj(self, proj: Record) -> Obj:
        entity, name = proj["entity"], proj["name"]
        prefix = f"{entity}/{name}/"

        def runs_of(args: dict[str, Any]) -> list[Record]:
            try:
                flt = Q.parse_filters(args.get("filters"))
                found = [
                    r
                    for k, r in self.state.runs.items()
                    if k.startswith(prefix) and Q.match(r, flt, self.shown_state)
                ]
                return Q.ordered(found, args.get("order"), self.shown_state)
            except Q.RunQueryError as exc:
                raise GraphQLError(str(exc), status=400) from None

        def sweeps_of(args: dict[str, Any]) -> Obj:
            found = [s for k, s in self.state.sweeps.items() if k.startswith(prefix)]
            return _connection([self.sweep_obj(s) for s in found], args)

        return {
            "__typename": "Project",
            "id": node_id("Project", name, entity),
            "internalId": str(proj.get("internal_id", 0)),
            "name": name,
            "entityName": entity,
            "entity": lambda a: self.entity({"name": entity}),
            "createdAt": proj["created_at"],
            "isBenchmark": False,
            "readOnly": False,
            "access": "PRIVATE",
            "description": None,
            "user": lambda a: self.user(),
            "run": lambda a: self._run_or_none(entity, name, a.get("name")),
            "bucket": lambda a: self._run_or_none(entity, name, a.get("name")),
            "runs": lambda a: _connection([self.run_obj(r) for r in runs_of(a)], a),
            "runCount": lambda a: len(runs_of(a)),
            "sweep": lambda a: self._sweep_or_none(entity, name, a.get("sweepName")),
            "sweeps": sweeps_of,
            "totalSweeps": sum(1 for k in self.state.sweeps if k.startswith(prefix)),
            "artifact": lambda a: self._artifact_or_none(entity, name, a.get("name")),
            "artifactType": lambda a: self._artifact_type(entity, name, a.get("name")),
            "artifactCollectionMembership": lambda a: self.artifacts.membership(
                entity, name, a.get("name") or ""
            ),
            "artifactCollection": lambda a: self._collection(entity, name, a.get("name")),
            "artifactCollections": lambda a: self.artifacts.collections_of(entity, name, None, a),
        }

    def _artifact_or_none(self, entity: str, project: str, ref: str | None) -> Obj | None:
        art = self.artifacts.resolve(entity, project, ref or "")
        return self.artifacts.art_obj(art) if art is not None else None

    def _artifact_by_id(self, artifact_id: str | None) -> Obj | None:
        art = self.state.artifacts.get(artifact_id or "")
        return self.artifacts.art_obj(art) if art is not None else None

    def _artifact_type(self, entity: str, project: str, name: str | None) -> Obj | None:
        prefix = f"{entity}/{project}/"
        if any(
            k.startswith(prefix) and c["type"] == name for k, c in self.state.collections.items()
        ):
            return self.artifacts.type_obj(name or "", entity, project)
        return None

    def _collection(self, entity: str, project: str, name: str | None) -> Obj | None:
        coll = self.artifacts.collection(entity, project, name or "")
        return self.artifacts.coll_obj(coll) if coll is not None else None

    def _run_or_none(self, entity: str, project: str, name: str | None) -> Obj | None:
        run = self.state.run(entity, project, name or "")
        return self.run_obj(run) if run is not None else None

    def _sweep_or_none(self, entity: str, project: str, name: str | None) -> Obj | None:
        sweep = self.state.sweeps.get(f"{entity}/{project}/{name}")
        return self.sweep_obj(sweep) if sweep is not None else None

    def run_obj(self, run: Record) -> Obj:
        entity, project, name = run["entity"], run["project"], run["name"]
        proj = self.state.project(entity, project) or {"entity": entity, "name": project}
        summary = dict(run["summary"])
        return {
            "__typename": "Run",
            "id": node_id("Run", name, project, entity),
            "name": name,
            "displayName": run.get("display_name") or name,
            "description": run.get("notes"),
            "notes": run.get("notes"),
            "state": self.shown_state(run),
            "config": run["config"],
            "summaryMetrics": json.dumps(summary),
            "systemMetrics": "{}",
            "group": run.get("group"),
            "jobType": run.get("job_type"),
            "commit": run.get("commit"),
            "host": run.get("host"),
            "program": run.get("program"),
            "tags": run.get("tags") or [],
            "readOnly": False,
            "createdAt": iso(run["created_at"]),
            "heartbeatAt": iso(run["heartbeat_at"]),
            "updatedAt": iso(run["heartbeat_at"]),
            "exitcode": run.get("exitcode"),
            "sweepName": run.get("sweep"),
            "shouldStop": False,
            "failed": self.shown_state(run) in ("failed", "crashed"),
            "stopped": run["state"] == "killed",
            "running": run["state"] in S.RUN_STATES_ACTIVE,
            "historyLineCount": len(run["history"]),
            "eventsLineCount": len(run["events"]),
            "logLineCount": run["log_lines"],
            # What costs a pass over the history is computed only when it is selected
            # (a Runs page of 64 runs asks for none of it).
            "historyTail": lambda a: _tail(run["history"]),
            "eventsTail": lambda a: _tail(run["events"]),
            "historyKeys": lambda a: _history_keys(run),
            "history": lambda a: _sampled_lines(_steps(run["history"], a), a.get("samples")),
            "events": lambda a: _sampled_lines(run["events"], a.get("samples")),
            "sampledHistory": lambda a: _sampled(run, a.get("specs") or []),
            "wandbConfig": lambda a: json.dumps(_wandb_config(run, a.get("keys"))),
            "user": {"name": L.USER, "username": L.USER},
            "projectId": str(proj.get("internal_id", 0)),
            "project": lambda a: self.project_obj(proj),
            "sweep": lambda a: self._sweep_or_none(entity, project, run.get("sweep")),
            "fileCount": len(run.get("files") or {}),
            "files": lambda a: _connection(self._files(run, a), a),
            "outputArtifacts": lambda a: _connection(self.artifacts.logged_by_run(run), a),
            "inputArtifacts": lambda a: _connection(self.artifacts.used_by_run(run), a),
        }

    def _files(self, run: Record, args: dict[str, Any]) -> list[Obj]:
        """``files(names:, pattern:)``: what the run uploaded (``run.save``, wandb-core's
        own files), by name."""
        entity, project, name = run["entity"], run["project"], run["name"]
        names = args.get("names") or []
        pattern = args.get("pattern")
        base = self.base_url()
        out = []
        for fname, meta in sorted((run.get("files") or {}).items()):
            if names and fname not in names:
                continue
            if pattern and not fnmatch.fnmatch(fname, pattern.replace("%", "*")):
                continue
            url = f"{base}/_storage/{entity}/{project}/{name}/{fname}"
            out.append(
                {
                    "__typename": "File",
                    "id": node_id("File", name, project, entity, fname),
                    "name": fname,
                    "url": url,
                    "directUrl": url,
                    "sizeBytes": meta.get("size"),
                    "mimetype": mimetypes.guess_type(fname)[0] or "application/octet-stream",
                    "updatedAt": iso(meta.get("updated_at")),
                    "md5": meta.get("md5"),
                }
            )
        return out

    def shown_state(self, run: Record) -> str:
        """The stored state, or what W&B shows for a run whose client went quiet: a running
        run becomes ``crashed``, a preempting one ``preempted`` (a resume revives either)."""
        state = str(run["state"])
        quiet = time.time() - float(run["heartbeat_at"]) > self.crash_after
        if quiet and state in ("running", "preempting"):
            return "crashed" if state == "running" else "preempted"
        return state

    def sweep_obj(self, sweep: Record) -> Obj:
        runs = S.sweep_runs(self.state, sweep)
        runs.sort(key=lambda r: r["created_at"])
        return {
            "__typename": "Sweep",
            "id": node_id("Sweep", sweep["name"], sweep["project"], sweep["entity"]),
            "name": sweep["name"],
            "displayName": sweep["config"].get("name"),
            "method": sweep["config"]["method"],
            "state": sweep["state"],
            "description": sweep["config"].get("description"),
            "bestLoss": S.best_metric(self.state, sweep),
            "config": sweep["config_text"],
            "createdAt": iso(sweep["created_at"]),
            "updatedAt": iso(sweep["updated_at"]),
            "heartbeatAt": iso(sweep["updated_at"]),
            "runCount": len(runs),
            "runCountExpected": S.expected_runs(sweep),
            "earlyStopJobRunning": False,
            "controller": None,
            "scheduler": None,
            "project": lambda a: self.project_obj(
                self.state.project(sweep["entity"], sweep["project"], create=True) or {}
            ),
            "runs": lambda a: _connection([self.run_obj(r) for r in runs], a),
            "agents": lambda a: _connection(
                [
                    self.agent_obj(g)
                    for g in self.state.agents.values()
                    if g["sweep"] == sweep["key"]
                ],
                a,
            ),
        }

    def agent_obj(self, agent: Record) -> Obj:
        return {
            "__typename": "Agent",
            "id": agent["id"],
            "name": agent["id"],
            "state": agent.get("state", "RUNNING"),
            "host": agent["host"],
            "persistent": False,
            "createdAt": iso(agent["created_at"]),
            "heartbeatAt": iso(agent["heartbeat_at"]),
            "totalRuns": len(agent["runs"]),
        }

    # root fields ------------------------------------------------------------------------

    def root(self) -> Obj:
        return {
            "query": {
                "viewer": self.user(),
                "entity": self.entity,
                "project": self._project_arg,
                "model": self._project_arg,
                "projects": self._projects,
                "models": self._projects,  # GetProjects asks by the legacy name
                "serverInfo": self.server_info(),
                "artifact": lambda a: self._artifact_by_id(a.get("id")),
            },
            "mutation": {
                "upsertBucket": self.upsert_bucket,
                "createRunFiles": self.create_run_files,
                "upsertModel": self.upsert_project,
                "upsertProject": self.upsert_project,
                "upsertSweep": self.upsert_sweep,
                "createAgent": self.create_agent,
                "agentHeartbeat": self.agent_heartbeat,
                "stopRun": lambda a: None,
                "createArtifact": self._changing(self.artifacts.create_artifact),
                "createArtifactManifest": self._changing(self.artifacts.create_manifest),
                "updateArtifactManifest": self._changing(self.artifacts.create_manifest),
                "createArtifactFiles": self._changing(self.artifacts.create_files),
                "commitArtifact": self._changing(self.artifacts.commit),
                "useArtifact": self._changing(self.artifacts.use),
                "addAliases": self._changing(self.artifacts.add_aliases),
                "deleteAliases": self._changing(self.artifacts.delete_aliases),
                "updateArtifact": self._changing(self.artifacts.update),
            },
        }

    def _changing(self, fn: Callable[[dict[str, Any]], Obj]) -> Callable[[dict[str, Any]], Obj]:
        def call(args: dict[str, Any]) -> Obj:
            self.changed = True
            return fn(args)

        return call

    def server_info(self) -> Obj:
        return {
            "__typename": "ServerInfo",
            "features": [],
            "availableBucketProviders": ["file"],
            "cliVersionInfo": {"max_cli_version": "999.0.0"},
            "latestLocalVersionInfo": None,
            "version": L.SERVER_VERSION,
            "isLocalServer": True,
        }

    def _projects(self, args: dict[str, Any]) -> Obj:
        entity = args.get("entityName") or L.USER
        found = [p for p in self.state.projects.values() if p["entity"] == entity]
        return _connection([self.project_obj(p) for p in found], args)

    def _project_arg(self, args: dict[str, Any]) -> Obj | None:
        proj = self.state.project(args.get("entityName") or L.USER, args.get("name") or "")
        return self.project_obj(proj) if proj is not None else None

    def upsert_project(self, args: dict[str, Any]) -> Obj:
        inp = args.get("input") or {}
        proj = self.state.project(inp.get("entityName") or L.USER, inp["name"], create=True)
        self.changed = True
        return {
            "project": self.project_obj(proj or {}),
            "model": self.project_obj(proj or {}),
            "inserted": True,
        }

    def upsert_bucket(self, args: dict[str, Any]) -> Obj:
        inp = args.get("input") or {}
        entity = inp.get("entityName") or L.USER
        project = inp.get("modelName") or "uncategorized"
        name = inp.get("name")
        if not name and inp.get("id"):
            # the public API's run.update() and summary.update() name the run by its node
            # id alone: the run's own entity and project, never a new run elsewhere
            parts = decode_id(inp["id"])
            if len(parts) < 5 or parts[0] != "Run" or self.state.run(*parts[4:1:-1]) is None:
                raise GraphQLError(f"run {inp['id']} not found", status=404)
            name, project, entity = parts[2], parts[3], parts[4]
        if not name:
            raise GraphQLError("upsertBucket needs a run name (the run id)")
        sweep = inp.get("sweep")
        if sweep and f"{entity}/{project}/{sweep}" not in self.state.sweeps:
            raise GraphQLError(f"sweep {entity}/{project}/{sweep} not found", status=404)
        run, inserted = self.state.upsert_run(entity, project, name, inp, revive=not inp.get("id"))
        self.changed = True
        return {"bucket": self.run_obj(run), "inserted": inserted}

    def create_run_files(self, args: dict[str, Any]) -> Obj:
        inp = args.get("input") or {}
        entity, project, run_name = inp["entityName"], inp["projectName"], inp["runName"]
        run = self.state.run(entity, project, run_name)
        if run is None:
            raise GraphQLError(f"run {entity}/{project}/{run_name} not found", status=404)
        base = self.base_url()
        return {
            "runID": node_id("Run", run_name, project, entity),
            "uploadHeaders": [],
            "files": [
                {"name": f, "uploadUrl": f"{base}/_storage/{entity}/{project}/{run_name}/{f}"}
                for f in inp.get("files") or []
            ],
        }

    def upsert_sweep(self, args: dict[str, Any]) -> Obj:
        inp = args.get("input") or {}
        if inp.get("id"):  # a state change (wandb sweep --stop/--cancel/--pause/--resume)
            parts = decode_id(inp["id"])
            key = f"{parts[4]}/{parts[3]}/{parts[2]}" if len(parts) >= 5 else ""
            sweep = self.state.sweeps.get(key)
            if sweep is None:
                raise GraphQLError(f"sweep {inp['id']} not found", status=404)
            if inp.get("state"):
                sweep["state"] = str(inp["state"]).upper()
            sweep["updated_at"] = time.time()
            self.changed = True
            return {"sweep": self.sweep_obj(sweep), "configValidationWarnings": []}
        text = inp.get("config") or ""
        try:
            cfg = S.parse_config(text)
        except S.SweepConfigError as exc:
            raise GraphQLError(str(exc), status=400) from None
        entity = inp.get("entityName") or L.USER
        project = inp.get("projectName") or cfg.get("project") or "uncategorized"
        self.state.project(entity, project, create=True)
        name = S._run_id()
        now = time.time()
        sweep = {
            "key": f"{entity}/{project}/{name}",
            "entity": entity,
            "project": project,
            "name": name,
            "config_text": text,
            "config": cfg,
            "state": str(inp.get("state") or "RUNNING").upper(),
            "created_at": now,
            "updated_at": now,
            "handed_out": [],
            "agent_timeout": self.agent_timeout,
        }
        self.state.sweeps[sweep["key"]] = sweep
        self.changed = True
        return {"sweep": self.sweep_obj(sweep), "configValidationWarnings": []}

    def create_agent(self, args: dict[str, Any]) -> Obj:
        inp = args.get("input") or {}
        entity = inp.get("entityName") or L.USER
        project = inp.get("projectName") or "uncategorized"
        key = f"{entity}/{project}/{inp.get('sweep')}"
        if key not in self.state.sweeps:
            raise GraphQLError(f"sweep {key} not found", status=404)
        agent_id = node_id("Agent", str(self.state.next_number()))
        now = time.time()
        self.state.agents[agent_id] = {
            "id": agent_id,
            "sweep": key,
            "host": inp.get("host") or "",
            "created_at": now,
            "heartbeat_at": now,
            "runs": [],
        }
        self.changed = True
        return {"agent": self.agent_obj(self.state.agents[agent_id])}

    def agent_heartbeat(self, args: dict[str, Any]) -> Obj:
        inp = args.get("input") or {}
        agent = self.state.agents.get(inp.get("id") or "")
        if agent is None:
            raise GraphQLError("agent not found", status=404)
        run_state = json.loads(inp.get("runState") or "{}")
        commands = S.heartbeat(self.state, agent, run_state)
        self.changed = True
        return {"agent": self.agent_obj(agent), "commands": json.dumps(commands)}


def _steps(lines: list[str], args: dict[str, Any]) -> list[str]:
    """History rows with ``minStep <= _step < maxStep`` (HistoryPage's window)."""
    lo, hi = args.get("minStep"), args.get("maxStep")
    if lo is None and hi is None:
        return lines
    out = []
    for line in lines:
        step = json.loads(line).get("_step", 0)
        if (lo is None or step >= lo) and (hi is None or step < hi):
            out.append(line)
    return out


def _sampled_lines(lines: list[str], samples: Any) -> list[str]:
    n = int(samples or 500)
    if len(lines) <= n:
        return list(lines)
    stride = len(lines) / n
    return [lines[int(i * stride)] for i in range(n)]


def _wandb_config(run: Record, keys: Any) -> Obj:
    cfg = json.loads(run["config"] or "{}")
    wb = cfg.get("_wandb", {})
    value = wb.get("value", {}) if isinstance(wb, dict) else {}
    return {k: value.get(k) for k in keys} if keys else value
