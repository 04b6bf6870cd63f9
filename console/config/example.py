"""The commented example config `phantom init` writes, generated from the settings' own docs.

Every setting in ``console.config`` carries an attribute docstring; this module reads them
(from the source, with ``ast``) and lays the defaults out as TOML with those docs as
comments. A setting added without a doc fails ``missing_docs()`` (a test), so the example
can never drift from the code.
"""

from __future__ import annotations

import ast
import inspect
import json
from collections.abc import Mapping
from dataclasses import MISSING, fields, is_dataclass
from functools import cache
from typing import Any

from console import config as config_module
from console.config import Config
from console.config import alerts as alerts_module
from console.config import prices as prices_module

# [runtime_env] is written with a typical value, not its empty default: the example shows
# how secrets are referenced by name.
RUNTIME_ENV_EXAMPLE = {
    "pip": [],
    "env_vars": {"WANDB_PROJECT": "phantom", "WANDB_API_KEY": "$WANDB_API_KEY"},
}
# Top-level settings written as one-key tables, as users write them.
_TABLES = {"bootstrap_command": ("bootstrap", "command"), "storage": ("storage", "uri")}
_SKIP = {"source", "name", "state_dir"}
# [[clusters]]: the fleet form (console/config/fleet.py), shown commented out: a file has it
# or [cluster], never both.
FLEET_EXAMPLE = [
    "",
    "# A fleet: instead of [cluster], one [[clusters]] entry per cluster, each a name (lower-case",
    "# letters, digits and '-', unique) and its cluster's own sections (cluster, ssh, ray,",
    "# capacity, gke, prices, storage, bootstrap, runtime_env), laid over the top-level ones.",
    "# `phantom --cluster NAME ...` picks one (docs/fleet.md).",
    "# [[clusters]]",
    '# name = "pod-a"',
    "# [clusters.cluster]",
    '# provider = "local"',
    '# zone = "local-a"',
    "#",
    "# [[clusters]]",
    '# name = "grpo"',
    "# [clusters.cluster]",
    '# provider = "gke"',
]


@cache
def field_docs() -> dict[str, dict[str, str]]:
    """{class name: {field: doc}} for every settings dataclass in console.config."""
    out: dict[str, dict[str, str]] = {}
    body = [
        node
        for module in (config_module, alerts_module, prices_module)
        for node in ast.parse(inspect.getsource(module)).body
    ]
    for node in body:
        if not isinstance(node, ast.ClassDef):
            continue
        docs: dict[str, str] = {}
        stmts = node.body
        for stmt, nxt in zip(stmts, [*stmts[1:], None], strict=True):
            if (
                isinstance(stmt, ast.AnnAssign)
                and isinstance(stmt.target, ast.Name)
                and isinstance(nxt, ast.Expr)
                and isinstance(nxt.value, ast.Constant)
                and isinstance(nxt.value.value, str)
            ):
                docs[stmt.target.id] = inspect.cleandoc(nxt.value.value)
        out[node.name] = docs
    return out


def missing_docs() -> list[str]:
    """Settings without a doc (each must explain itself in the example)."""
    docs = field_docs()
    missing: list[str] = []
    for f in fields(Config):
        section = _section_class(f)
        if section is None:
            if f.name not in _SKIP and f.name not in docs["Config"]:
                missing.append(f"Config.{f.name}")
            continue
        have = docs.get(section.__name__, {})
        missing += [f"{section.__name__}.{g.name}" for g in fields(section) if g.name not in have]
    return missing


def example_config() -> str:
    docs = field_docs()
    defaults = Config()
    lines = [
        "# Phantom Console configuration (`phantom init` wrote this; every key is optional).",
        "# With no config file at all, phantom drives the built-in local pod emulator.",
    ]
    for f in fields(Config):
        section = _section_class(f)
        if section is not None:
            lines += ["", f"[{f.name}]"]
            if section.__doc__:
                lines += _comment(inspect.cleandoc(section.__doc__).splitlines()[0])
            values = section()  # its own defaults (Config resolves some "auto" values)
            for g in fields(section):
                lines += _entry(g.name, getattr(values, g.name), docs[section.__name__][g.name])
        elif f.name in _TABLES:
            table, key = _TABLES[f.name]
            lines += ["", f"[{table}]"]
            lines += _entry(key, getattr(defaults, f.name), docs["Config"][f.name])
        elif f.name == "runtime_env":
            lines += ["", "[runtime_env]", *_comment(docs["Config"][f.name])]
            lines += [f"{k} = {_toml(v)}" for k, v in RUNTIME_ENV_EXAMPLE.items()]
        elif f.name == "keys":
            lines += ["", "[keys]", *_comment(docs["Config"][f.name]), '# recover = "R"']
    return "\n".join(lines + FLEET_EXAMPLE) + "\n"


def _section_class(f: Any) -> type | None:
    factory = f.default_factory
    if factory is MISSING or not (isinstance(factory, type) and is_dataclass(factory)):
        return None
    return factory


def _entry(key: str, value: Any, doc: str) -> list[str]:
    line = f"{key} = {_toml(value)}"
    # An empty default means "decided for you" (or "none", a list of tables such as
    # [[alerts.notify]] that an uncommented `key = []` would clash with): shown, left out.
    return [*_comment(doc), f"# {line}" if value in ("", ()) else line]


def _comment(doc: str) -> list[str]:
    """Doc lines as TOML comments, without the "[table] key: " the docs start with."""
    if doc.startswith("["):
        doc = doc.split(": ", 1)[-1]
        doc = doc[:1].upper() + doc[1:]
    return [f"# {line}".rstrip() for line in doc.splitlines()]


def _toml(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int | float):
        return repr(value)
    if isinstance(value, str):
        return json.dumps(value)
    if isinstance(value, Mapping):
        inner = ", ".join(f"{k} = {_toml(v)}" for k, v in value.items())
        return "{ " + inner + " }" if inner else "{}"
    if isinstance(value, list | tuple):
        return "[" + ", ".join(_toml(v) for v in value) + "]"
    raise TypeError(f"no TOML for {value!r}")
