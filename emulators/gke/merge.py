"""Patch semantics: RFC 7386 merge patch, and the strategic merge kubectl sends for
built-in kinds (lists of named items merged by ``name``; ``$patch``, ``$retainKeys``,
``$setElementOrder/*`` and ``$deleteFromPrimitiveList/*`` directives consumed).

Server-side apply is approximated by the strategic merge of the applied configuration
onto the live object: fields a manager stops applying are not removed (no managedFields).
"""

from __future__ import annotations

import copy
from typing import Any


def merge_patch(target: Any, patch: Any) -> Any:
    """RFC 7386 JSON merge patch."""
    if not isinstance(patch, dict):
        return copy.deepcopy(patch)
    out = copy.deepcopy(target) if isinstance(target, dict) else {}
    for k, v in patch.items():
        if v is None:
            out.pop(k, None)
        else:
            out[k] = merge_patch(out.get(k), v)
    return out


def _named(items: list[Any]) -> bool:
    return bool(items) and all(isinstance(i, dict) and "name" in i for i in items)


def _merge_list(live: list[Any], patch: list[Any]) -> list[Any]:
    out = copy.deepcopy(live)
    index = {item["name"]: i for i, item in enumerate(out)}
    for item in patch:
        directive = item.get("$patch")
        if directive == "delete":
            out = [o for o in out if o.get("name") != item["name"]]
            index = {o["name"]: i for i, o in enumerate(out)}
        elif item["name"] in index:
            out[index[item["name"]]] = strategic_merge(out[index[item["name"]]], item)
        else:
            out.append(strategic_merge(None, item))
            index[item["name"]] = len(out) - 1
    return out


def strategic_merge(target: Any, patch: Any) -> Any:
    if not isinstance(patch, dict):
        return copy.deepcopy(patch)
    if patch.get("$patch") == "replace":
        return {k: copy.deepcopy(v) for k, v in patch.items() if k != "$patch"}
    out = copy.deepcopy(target) if isinstance(target, dict) else {}
    for k, v in patch.items():
        if k in ("$patch", "$retainKeys") or k.startswith("$setElementOrder/"):
            continue
        if k.startswith("$deleteFromPrimitiveList/"):
            key = k.split("/", 1)[1]
            if isinstance(out.get(key), list):
                out[key] = [x for x in out[key] if x not in (v or [])]
            continue
        cur = out.get(k)
        if v is None:
            out.pop(k, None)
        elif isinstance(v, list) and isinstance(cur, list) and _named(v) and _named(cur):
            out[k] = _merge_list(cur, v)
        elif isinstance(v, list):
            out[k] = [strategic_merge(None, i) for i in v if not _deleted(i)]
        else:
            out[k] = strategic_merge(cur, v)
    retain = patch.get("$retainKeys")
    if isinstance(retain, list):
        out = {k: v for k, v in out.items() if k in retain}
    return out


def _deleted(item: Any) -> bool:
    return isinstance(item, dict) and item.get("$patch") == "delete"
