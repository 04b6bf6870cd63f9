"""Artifacts: versions in a collection (sequence), their manifest and files, and aliases.

wandb-core's ``ArtifactSaver.Save`` (core/pkg/artifacts/saver.go) sends, in order:
``CreateArtifact`` (PENDING, or COMMITTED when a version with the same digest exists),
``CreateArtifactManifest`` (includeUpload false), ``CreateArtifactFiles`` (one upload URL
per file, storage layout V2), a PUT per file, ``CreateArtifactManifest`` again with the
manifest digest and an upload URL for ``wandb_manifest.json``, its PUT, then
``CommitArtifact``. A commit gives the version its index (``v0``, ``v1``...) and moves its
aliases (``latest`` always) onto it.
"""

from __future__ import annotations

import base64
import time
from collections.abc import Callable
from typing import Any

from emulators.wandb import layout as L
from emulators.wandb.state import Record, State, iso, node_id

Obj = dict[str, Any]


class ArtifactError(Exception):
    """Reported as a GraphQL error; ``status`` is the HTTP status."""

    def __init__(self, message: str, status: int = 200) -> None:
        super().__init__(message)
        self.status = status


class Artifacts:
    def __init__(self, state: State, base_url: Callable[[], str]) -> None:
        self.state = state
        self.base_url = base_url

    # lookups ----------------------------------------------------------------------------

    def collection(self, entity: str, project: str, name: str) -> Record | None:
        return self.state.collections.get(f"{entity}/{project}/{name}")

    def resolve(self, entity: str, project: str, ref: str) -> Record | None:
        """``name:alias`` or ``name:vN`` (or a bare name = ``latest``) to a committed version."""
        name, _, tag = ref.partition(":")
        coll = self.collection(entity, project, name)
        if coll is None:
            return None
        tag = tag or "latest"
        if tag in coll["aliases"]:
            return self.state.artifacts.get(coll["aliases"][tag])
        if tag.startswith("v") and tag[1:].isdigit():
            index = int(tag[1:])
            committed = [self.state.artifacts[a] for a in coll["versions"]]
            for art in committed:
                if art.get("version_index") == index:
                    return art
        return None

    # objects ----------------------------------------------------------------------------

    def type_obj(self, name: str, entity: str, project: str) -> Obj:
        return {
            "__typename": "ArtifactType",
            "id": node_id("ArtifactType", name, project, entity),
            "name": name,
            "description": None,
            "createdAt": iso(),
            "artifactCollection": lambda a: self._coll_obj_or_none(entity, project, a.get("name")),
            "artifactSequence": lambda a: self._coll_obj_or_none(entity, project, a.get("name")),
            "artifactCollections": lambda a: self.collections_of(entity, project, name, a),
        }

    def _coll_obj_or_none(self, entity: str, project: str, name: str | None) -> Obj | None:
        coll = self.collection(entity, project, name or "")
        return self.coll_obj(coll) if coll is not None else None

    def coll_obj(self, coll: Record) -> Obj:
        committed = [
            self.state.artifacts[a]
            for a in coll["versions"]
            if self.state.artifacts[a]["state"] == "COMMITTED"
        ]
        latest = committed[-1] if committed else None
        return {
            "__typename": "ArtifactSequence",
            "id": coll["id"],
            "name": coll["name"],
            "description": None,
            "createdAt": iso(coll["created_at"]),
            "updatedAt": iso(coll["created_at"]),
            "state": "READY",
            "digestAlgorithm": "MANIFEST_MD5",
            "tags": {"edges": []},
            "aliases": lambda a: _conn(
                [self.alias_obj(coll, name) for name in sorted(coll["aliases"])]
            ),
            "defaultArtifactType": self.type_obj(coll["type"], coll["entity"], coll["project"]),
            "project": self.collection_info(coll)["project"],
            "latestArtifact": {"id": latest["id"], "versionIndex": latest["version_index"]}
            if latest
            else None,
            "artifacts": lambda a: self._versions(committed, a),
            "artifactMembership": lambda a: self.membership(
                coll["entity"], coll["project"], f"{coll['name']}:{a.get('aliasName') or 'latest'}"
            ),
        }

    def art_obj(self, art: Record) -> Obj:
        coll = self.state.collections[art["collection"]]
        aliases = [a for a, aid in coll["aliases"].items() if aid == art["id"]]
        files = art["files"]
        base = self.base_url()
        index = art.get("version_index")
        return {
            "__typename": "Artifact",
            "id": art["id"],
            "artifactSequence": self.collection_info(coll),
            "artifactType": {"id": node_id("ArtifactType", coll["type"]), "name": coll["type"]},
            "name": f"{coll['name']}:v{index}" if index is not None else coll["name"],
            "versionIndex": index,
            "description": art.get("description"),
            "metadata": art.get("metadata") or "{}",
            "digest": art["digest"],
            "state": art["state"],
            "size": sum(int(f.get("size") or 0) for f in files.values()),
            "fileCount": len(files),
            "commitHash": art["digest"][:20],
            "createdAt": iso(art["created_at"]),
            "updatedAt": iso(art.get("committed_at") or art["created_at"]),
            "historyStep": art.get("history_step"),
            "ttlDurationSeconds": -1,
            "ttlIsInherited": True,
            "tags": [],
            "aliases": [self.alias_obj(coll, a) for a in aliases],
            "currentManifest": {
                "id": art.get("manifest_id"),
                "file": {
                    "id": node_id("File", art["id"], "wandb_manifest.json"),
                    "directUrl": f"{base}/_artifacts/{_num(art['id'])}/wandb_manifest.json",
                },
            },
            "digestAlgorithm": "MANIFEST_MD5",
            "createdBy": lambda a: self._run_obj(coll["entity"], coll["project"], art.get("run")),
            "usedBy": lambda a: _conn(
                [
                    o
                    for r in self.state.runs.values()
                    if art["id"] in (r.get("used_artifacts") or [])
                    and (o := self._run_info(r)) is not None
                ]
            ),
            "files": lambda a: _conn([self._file_obj(art, name) for name in sorted(files)]),
        }

    def _run_info(self, run: Record) -> Obj:
        """RunInfoFragment: the run an artifact was logged or used by."""
        proj = self.state.project(run["entity"], run["project"]) or {}
        return {
            "__typename": "Run",
            "id": node_id("Run", run["name"], run["project"], run["entity"]),
            "name": run["name"],
            "project": {
                "id": node_id("Project", run["project"], run["entity"]),
                "internalId": str(proj.get("internal_id", 0)),
                "name": run["project"],
                "entity": {"name": run["entity"]},
            },
        }

    def _run_obj(self, entity: str, project: str, name: str | None) -> Obj | None:
        run = self.state.run(entity, project, name or "")
        return self._run_info(run) if run is not None else None

    def _versions(self, committed: list[Record], args: Obj) -> Obj:
        """A collection's versions (ProjectArtifacts: each edge also carries ``version``),
        newest first unless ``order`` says ``+``."""
        newest_first = not str(args.get("order") or "-").startswith("+")
        arts = sorted(committed, key=lambda x: x["version_index"], reverse=newest_first)
        conn = _page([self.art_obj(x) for x in arts], args)
        for edge in conn["edges"]:
            edge["version"] = f"v{edge['node']['versionIndex']}"
        return conn

    def collections_of(self, entity: str, project: str, type_name: str | None, args: Obj) -> Obj:
        """``artifactCollections`` of a project (or of one of its types)."""
        found = [
            c
            for c in self.state.collections.values()
            if c["entity"] == entity
            and c["project"] == project
            and (type_name is None or c["type"] == type_name)
            and any(self.state.artifacts[a]["state"] == "COMMITTED" for a in c["versions"])
        ]
        found.sort(key=lambda c: c["created_at"])
        return _page([self.coll_obj(c) for c in found], args)

    def logged_by_run(self, run: Record) -> list[Obj]:
        """``run.outputArtifacts``: the committed versions the run logged, oldest first."""
        prefix = f"{run['entity']}/{run['project']}/"
        arts = [
            a
            for a in self.state.artifacts.values()
            if a.get("run") == run["name"]
            and a["state"] == "COMMITTED"
            and a["collection"].startswith(prefix)
        ]
        arts.sort(key=lambda a: a.get("committed_at") or a["created_at"])
        return [self.art_obj(a) for a in arts]

    def used_by_run(self, run: Record) -> list[Obj]:
        """``run.inputArtifacts``: what the run used (``use_artifact``), in order."""
        ids = run.get("used_artifacts") or []
        return [self.art_obj(self.state.artifacts[i]) for i in ids if i in self.state.artifacts]

    def collection_info(self, coll: Record) -> Obj:
        """CollectionInfoFragment / SourceCollectionInfoFragment with ProjectInfoFragment."""
        proj = self.state.project(coll["entity"], coll["project"]) or {}
        return {
            "__typename": "ArtifactSequence",
            "id": coll["id"],
            "name": coll["name"],
            "project": {
                "id": node_id("Project", coll["project"], coll["entity"]),
                "internalId": str(proj.get("internal_id", 0)),
                "name": coll["project"],
                "entityName": coll["entity"],
                "entity": {"id": node_id("Entity", coll["entity"]), "name": coll["entity"]},
            },
            "latestArtifact": None,
        }

    def alias_obj(self, coll: Record, alias: str) -> Obj:
        return {
            "__typename": "ArtifactAlias",
            "id": node_id("ArtifactAlias", coll["name"], alias),
            "alias": alias,
            "artifactCollection": self.collection_info(coll),
        }

    def membership(self, entity: str, project: str, ref: str) -> Obj | None:
        """``artifactCollectionMembership(name: "model:latest")``: a version seen from its
        collection (ArtifactMembershipFragment)."""
        art = self.resolve(entity, project, ref)
        if art is None:
            return None
        coll = self.state.collections[art["collection"]]
        aliases = [a for a, aid in coll["aliases"].items() if aid == art["id"]]
        return {
            "__typename": "ArtifactCollectionMembership",
            "id": node_id("ArtifactCollectionMembership", art["id"]),
            "versionIndex": art.get("version_index"),
            "createdAt": iso(art["created_at"]),
            "aliases": [self.alias_obj(coll, a) for a in aliases],
            "artifactCollection": self.collection_info(coll),
            "artifact": self.art_obj(art),
            "files": self.art_obj(art)["files"],
        }

    def _file_obj(self, art: Record, name: str) -> Obj:
        url = f"{self.base_url()}/_artifacts/{_num(art['id'])}/{name}"
        return {
            "__typename": "File",
            "id": node_id("File", art["id"], name),
            "name": name,
            "displayName": name,
            "uploadUrl": url,
            "uploadHeaders": [],
            "uploadMultipartUrls": None,
            "storagePath": f"{_num(art['id'])}/{name}",
            "directUrl": url,
            "url": url,
            "sizeBytes": art["files"][name].get("size"),
            "md5": art["files"][name].get("md5"),
            "digest": art["files"][name].get("md5"),
            "artifact": {"id": art["id"]},
        }

    # mutations --------------------------------------------------------------------------

    def create_artifact(self, args: Obj) -> Obj:
        inp = args.get("input") or {}
        entity = inp.get("entityName") or L.USER
        project = inp.get("projectName") or "uncategorized"
        name = inp["artifactCollectionName"]
        self.state.project(entity, project, create=True)
        key = f"{entity}/{project}/{name}"
        coll = self.state.collections.get(key)
        if coll is None:
            coll = {
                "id": node_id("ArtifactSequence", str(self.state.next_number())),
                "entity": entity,
                "project": project,
                "name": name,
                "type": inp.get("artifactTypeName") or "unspecified",
                "created_at": time.time(),
                "versions": [],
                "aliases": {},
            }
            self.state.collections[key] = coll
        elif inp.get("artifactTypeName") and inp["artifactTypeName"] != coll["type"]:
            raise ArtifactError(
                f"artifact {name} is of type {coll['type']}, not {inp['artifactTypeName']}"
            )
        committed = [self.state.artifacts[a] for a in coll["versions"]]
        committed = [a for a in committed if a["state"] == "COMMITTED"]
        latest = committed[-1] if committed else None
        aliases = [a["alias"] for a in inp.get("aliases") or [] if a.get("alias")]
        same = next((a for a in committed if a["digest"] == inp.get("digest")), None)
        if same is not None:  # the same content again: no new version, aliases move
            self._alias(coll, same, aliases)
            art = same
        else:
            art = {
                "id": node_id("Artifact", str(self.state.next_number())),
                "collection": key,
                "digest": inp.get("digest") or "",
                "state": "PENDING",
                "created_at": time.time(),
                "description": inp.get("description"),
                "metadata": inp.get("metadata"),
                "history_step": inp.get("historyStep"),
                "run": inp.get("runName"),
                "pending_aliases": aliases,
                "files": {},
            }
            self.state.artifacts[art["id"]] = art
            coll["versions"].append(art["id"])
        return {
            "artifact": {
                "id": art["id"],
                "state": art["state"],
                "artifactSequence": {
                    "id": coll["id"],
                    "latestArtifact": {"id": latest["id"], "versionIndex": latest["version_index"]}
                    if latest
                    else None,
                },
            }
        }

    def create_manifest(self, args: Obj) -> Obj:
        inp = args.get("input") or args
        art = self._artifact(inp.get("artifactID"))
        art["manifest_id"] = art.get("manifest_id") or node_id("ArtifactManifest", art["id"])
        name = inp.get("name") or "wandb_manifest.json"
        url = f"{self.base_url()}/_artifacts/{_num(art['id'])}/{name}"
        return {
            "artifactManifest": {
                "id": art["manifest_id"],
                "file": {
                    "id": node_id("File", art["id"], name),
                    "name": name,
                    "displayName": name,
                    "uploadUrl": url,  # `@include(if: $includeUpload)` selects it
                    "uploadHeaders": [],
                },
            }
        }

    def create_files(self, args: Obj) -> Obj:
        inp = args.get("input") or {}
        edges = []
        for spec in inp.get("artifactFiles") or []:
            art = self._artifact(spec.get("artifactID"))
            art["files"][spec["name"]] = {"md5": spec.get("md5"), "size": None}
            edges.append({"node": self._file_obj(art, spec["name"])})
        return {"files": {"edges": edges}}

    def commit(self, args: Obj) -> Obj:
        inp = args.get("input") or {}
        art = self._artifact(inp.get("artifactID"))
        if art["state"] != "COMMITTED":
            coll = self.state.collections[art["collection"]]
            done = [self.state.artifacts[a] for a in coll["versions"]]
            art["version_index"] = sum(1 for a in done if a["state"] == "COMMITTED")
            art["state"] = "COMMITTED"
            art["committed_at"] = time.time()
            self._alias(coll, art, art.pop("pending_aliases", []))
        return {"artifact": {"id": art["id"], "digest": art["digest"]}}

    def use(self, args: Obj) -> Obj:
        inp = args.get("input") or {}
        art = self._artifact(inp.get("artifactID"))
        run = self.state.run(
            inp.get("entityName") or L.USER, inp.get("projectName") or "", inp.get("runName") or ""
        )
        if run is not None and art["id"] not in run.setdefault("used_artifacts", []):
            run["used_artifacts"].append(art["id"])
        return {"artifact": self.art_obj(art)}

    def add_aliases(self, args: Obj) -> Obj:
        """``addAliases``: each alias moves onto this version (an alias names one version
        of a collection, so it leaves the one that had it)."""
        inp = args.get("input") or {}
        art = self._artifact(inp.get("artifactID"))
        if art["state"] != "COMMITTED":
            raise ArtifactError(f"artifact {inp.get('artifactID')} is not committed")
        coll = self.state.collections[art["collection"]]
        for spec in inp.get("aliases") or []:
            alias = str(spec.get("alias") or "")
            _check_alias(alias)
            coll["aliases"][alias] = art["id"]
        return {"success": True}

    def delete_aliases(self, args: Obj) -> Obj:
        inp = args.get("input") or {}
        art = self._artifact(inp.get("artifactID"))
        coll = self.state.collections[art["collection"]]
        for spec in inp.get("aliases") or []:
            alias = str(spec.get("alias") or "")
            if coll["aliases"].get(alias) == art["id"] and alias != "latest":
                del coll["aliases"][alias]
        return {"success": True}

    def update(self, args: Obj) -> Obj:
        """``updateArtifact``: description, metadata and (older clients) the alias list."""
        inp = args.get("input") or {}
        art = self._artifact(inp.get("artifactID"))
        for key in ("description", "metadata"):
            if inp.get(key) is not None:
                art[key] = inp[key]
        if inp.get("aliases") is not None:
            coll = self.state.collections[art["collection"]]
            wanted = {str(a.get("alias") or "") for a in inp["aliases"]}
            for alias in wanted:
                _check_alias(alias)
            for alias, aid in list(coll["aliases"].items()):
                if aid == art["id"] and alias not in wanted and alias != "latest":
                    del coll["aliases"][alias]
            for alias in wanted:
                coll["aliases"][alias] = art["id"]
        return {"artifact": self.art_obj(art)}

    def _alias(self, coll: Record, art: Record, aliases: list[str]) -> None:
        for alias in {"latest", *aliases}:
            coll["aliases"][alias] = art["id"]

    def _artifact(self, artifact_id: str | None) -> Record:
        art = self.state.artifacts.get(artifact_id or "")
        if art is None:
            raise ArtifactError(f"artifact {artifact_id} not found", status=404)
        return art

    def stored(self, number: str, name: str, size: int) -> None:
        """An upload URL was PUT: record the file's size."""
        for art in self.state.artifacts.values():
            if _num(art["id"]) == number and name in art["files"]:
                art["files"][name]["size"] = size


def _num(artifact_id: str) -> str:
    """The number in an artifact id (``Artifact:v1:<n>``): its storage directory."""
    return base64.b64decode(artifact_id).decode().rsplit(":", 1)[-1]


def _check_alias(alias: str) -> None:
    if not alias or len(alias) > 128 or (alias.startswith("v") and alias[1:].isdigit()):
        raise ArtifactError(
            f"invalid alias {alias!r}: 1-128 characters, and not vN (version names are the "
            "server's)"
        )


def _page(nodes: list[Obj], args: Obj) -> Obj:
    """A page of a connection: ``after`` is the cursor of the last edge seen."""
    after = str(args.get("after") or "0")
    start = int(after) if after.isdigit() else 0
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


def _conn(nodes: list[Obj]) -> Obj:
    return {
        "edges": [{"node": n, "cursor": str(i + 1)} for i, n in enumerate(nodes)],
        "pageInfo": {"__typename": "PageInfo", "endCursor": str(len(nodes)), "hasNextPage": False},
        "totalCount": len(nodes),
    }
