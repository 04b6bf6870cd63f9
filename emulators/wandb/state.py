"""What the emulated W&B server knows: projects, runs (config, summary, history), sweeps, agents.

Plain JSON-able dicts, kept in memory and written atomically to ``state.json`` in the run
dir after every change, so a restarted emulator serves the same runs and sweeps.
"""

from __future__ import annotations

import base64
import hashlib
import json
import os
import time
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

Record = dict[str, Any]


def iso(ts: float | None = None) -> str:
    """W&B's timestamp format (UTC, no zone suffix)."""
    return datetime.fromtimestamp(ts if ts is not None else time.time(), UTC).strftime(
        "%Y-%m-%dT%H:%M:%S"
    )


def node_id(kind: str, *parts: str) -> str:
    """A GraphQL node id shaped like W&B's: base64 of ``Kind:v1:part:...``."""
    return base64.b64encode(":".join([kind, "v1", *parts]).encode()).decode()


def decode_id(value: str) -> list[str]:
    try:
        return base64.b64decode(value.encode(), validate=True).decode().split(":")
    except (ValueError, UnicodeDecodeError):
        return []


@dataclass
class State:
    path: Path | None = None
    projects: dict[str, Record] = field(default_factory=dict)  # "entity/project"
    runs: dict[str, Record] = field(default_factory=dict)  # "entity/project/run"
    sweeps: dict[str, Record] = field(default_factory=dict)  # "entity/project/sweep"
    agents: dict[str, Record] = field(default_factory=dict)  # agent id
    artifacts: dict[str, Record] = field(default_factory=dict)  # artifact id
    collections: dict[str, Record] = field(default_factory=dict)  # "entity/project/name"
    counter: int = 0

    # persistence -------------------------------------------------------------------------

    @classmethod
    def load(cls, path: Path) -> State:
        state = cls(path=path)
        try:
            data = json.loads(path.read_text())
        except FileNotFoundError:
            return state
        for key in ("projects", "runs", "sweeps", "agents", "artifacts", "collections"):
            setattr(state, key, dict(data.get(key, {})))
        state.counter = int(data.get("counter", 0))
        for key, run in state.runs.items():
            try:
                text = state._history_file(key).read_text()
            except FileNotFoundError:
                text = ""
            run["history"] = text.splitlines()
        return state

    def _history_file(self, run_key: str) -> Path:
        """History lives beside state.json, one JSONL file per run, appended as it streams
        (rewriting every row of every run on each request does not scale)."""
        assert self.path is not None
        digest = hashlib.sha256(run_key.encode()).hexdigest()[:32]
        return self.path.parent / "history" / f"{digest}.jsonl"

    def _persist_history(self, run: Record, offset: int, content: list[str], before: int) -> None:
        if self.path is None or not content:
            return
        path = self._history_file(f"{run['entity']}/{run['project']}/{run['name']}")
        path.parent.mkdir(parents=True, exist_ok=True)
        lines = content if offset == before else run["history"]  # a replay rewrites the file
        with open(path, "a" if offset == before else "w") as fh:
            fh.write("".join(line.rstrip("\n") + "\n" for line in lines))

    def save(self) -> None:
        if self.path is None:
            return
        data = {
            "projects": self.projects,
            "runs": {k: {**r, "history": []} for k, r in self.runs.items()},
            "sweeps": self.sweeps,
            "agents": self.agents,
            "artifacts": self.artifacts,
            "collections": self.collections,
            "counter": self.counter,
        }
        tmp = self.path.with_suffix(".tmp")
        tmp.write_text(json.dumps(data))
        os.replace(tmp, self.path)

    def next_number(self) -> int:
        self.counter += 1
        return self.counter

    # projects ----------------------------------------------------------------------------

    def project(self, entity: str, name: str, create: bool = False) -> Record | None:
        key = f"{entity}/{name}"
        proj = self.projects.get(key)
        if proj is None and create:
            proj = {
                "entity": entity,
                "name": name,
                "created_at": iso(),
                "internal_id": self.next_number(),
            }
            self.projects[key] = proj
        return proj

    # runs --------------------------------------------------------------------------------

    def run(self, entity: str, project: str, name: str) -> Record | None:
        return self.runs.get(f"{entity}/{project}/{name}")

    def upsert_run(
        self, entity: str, project: str, name: str, fields: Record, revive: bool = True
    ) -> tuple[Record, bool]:
        """Create or update a run from UpsertBucket's input; True if it was created.
        ``revive``: a config from wandb.init marks the run running again; an edit through
        the public API (``run.update()``) leaves its state alone."""
        self.project(entity, project, create=True)
        key = f"{entity}/{project}/{name}"
        run = self.runs.get(key)
        inserted = run is None
        now = time.time()
        if run is None:
            run = {
                "entity": entity,
                "project": project,
                "name": name,
                "display_name": name,
                "state": "running",
                "config": "{}",
                "summary": {},
                "history": [],
                "events": [],
                "log_lines": 0,
                "sweep": None,
                "created_at": now,
                "heartbeat_at": now,
                "tags": [],
                "exitcode": None,
                "files": {},
            }
            self.runs[key] = run
        for src, dst in (
            ("displayName", "display_name"),
            ("groupName", "group"),
            ("jobType", "job_type"),
            ("description", "notes"),
            ("notes", "notes"),  # after description: run.update() sends both, notes is newer
            ("host", "host"),
            ("jobProgram", "program"),
            ("commit", "commit"),
            ("tags", "tags"),
            ("sweep", "sweep"),
        ):
            if fields.get(src) is not None:
                run[dst] = fields[src]
        if fields.get("config") is not None:
            run["config"] = fields["config"]
        if fields.get("summaryMetrics") is not None:
            run["summary"].update(json.loads(fields["summaryMetrics"]))
        if fields.get("state"):
            run["state"] = fields["state"]
        elif revive and not inserted and fields.get("config") is not None:
            run["state"] = "running"  # wandb.init sends its config: a resumed run runs again
        if run["state"] == "running" and run.get("preempting"):
            run["state"] = "preempting"  # said once, it stays (a config update is no undo)
        run["heartbeat_at"] = now
        return run, inserted

    def stream(self, run: Record, body: Record) -> None:
        """Apply one file_stream request (wandb-core's filestream.FileStreamRequest)."""
        files = body.get("files") or {}
        for fname, chunk in files.items():
            offset = int(chunk.get("offset", 0))
            content = list(chunk.get("content") or [])
            if fname == "wandb-history.jsonl":
                before = len(run["history"])
                run["history"][offset:] = content
                self._persist_history(run, offset, content, before)
            elif fname == "wandb-events.jsonl":
                run["events"][offset:] = content
                del run["events"][:-1000]  # system metrics: a tail is enough
            elif fname == "wandb-summary.json":
                if content:
                    run["summary"] = json.loads(content[-1])
            elif fname == "output.log":
                run["log_lines"] = max(run["log_lines"], offset + len(content))
        run["heartbeat_at"] = time.time()
        if body.get("preempting"):
            run["preempting"] = True  # wandb-core says it once; later requests do not repeat it
        if run["state"] not in ("running", "preempting") or body.get("preempting"):
            run["state"] = "preempting" if run.get("preempting") else "running"
        if body.get("complete"):
            code = body.get("exitcode")
            run["exitcode"] = code
            # shown as W&B shows a run that said preempting and then exits non-zero; the
            # controller does not hand it out again (a deterministic failure would loop)
            failed = "preempted" if run.get("preempting") else "failed"
            run["state"] = "finished" if not code else failed
