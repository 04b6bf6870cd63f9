"""A small GraphQL reader and a permissive executor (stdlib only).

The emulator has no schema: it answers whatever selection the wandb SDK or wandb-core
sends by walking the query against plain Python data. A field is looked up by name in a
dict; a callable value is called with the field's arguments (that is how ``project(name:)``
or ``runs(first:)`` resolve); a field the emulator does not know answers ``null``, which is
what a real server does for an empty nullable field. So a client that asks for one field more
than we know still works.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any


class GraphQLSyntaxError(ValueError):
    pass


_TOKEN = re.compile(
    r'(?P<block>"""(?:[^"\\]|\\.|"(?!""))*""")'
    r'|(?P<str>"(?:[^"\\\n]|\\.)*")'
    r"|(?P<num>-?\d+(?:\.\d+)?(?:[eE][+-]?\d+)?)"
    r"|(?P<name>[_A-Za-z][_0-9A-Za-z]*)"
    r"|(?P<spread>\.\.\.)"
    r"|(?P<punct>[!$():=@\[\]{}|&])"
    r"|(?P<skip>[\s,\ufeff]+|#[^\n]*)",
)


def _tokens(text: str) -> list[tuple[str, str]]:
    out: list[tuple[str, str]] = []
    pos = 0
    while pos < len(text):
        m = _TOKEN.match(text, pos)
        if m is None:
            raise GraphQLSyntaxError(f"Syntax Error: unexpected character {text[pos]!r} at {pos}")
        pos = m.end()
        kind = m.lastgroup or ""
        if kind != "skip":
            out.append((kind, m.group()))
    return out


@dataclass
class Field:
    name: str
    alias: str
    args: dict[str, Any]  # values may hold _Var placeholders
    selections: list[Selection] | None
    directives: list[tuple[str, dict[str, Any]]] = field(default_factory=list)


@dataclass
class Spread:
    name: str  # fragment name, or "" for an inline fragment
    selections: list[Selection] | None
    directives: list[tuple[str, dict[str, Any]]] = field(default_factory=list)


Selection = Field | Spread


@dataclass(frozen=True)
class _Var:
    name: str


@dataclass
class Operation:
    kind: str  # query | mutation | subscription
    name: str
    defaults: dict[str, Any]
    selections: list[Selection]


@dataclass
class Document:
    operations: list[Operation]
    fragments: dict[str, list[Selection]]


class _Parser:
    def __init__(self, text: str) -> None:
        self.toks = _tokens(text)
        self.i = 0

    def peek(self) -> tuple[str, str]:
        return self.toks[self.i] if self.i < len(self.toks) else ("eof", "")

    def take(self, value: str | None = None) -> str:
        kind, tok = self.peek()
        if kind == "eof" or (value is not None and tok != value):
            raise GraphQLSyntaxError(f"Syntax Error: expected {value or 'a token'}, got {tok!r}")
        self.i += 1
        return tok

    def skip(self, value: str) -> bool:
        if self.peek()[1] == value and self.peek()[0] in ("punct", "spread", "name"):
            self.i += 1
            return True
        return False

    def document(self) -> Document:
        ops: list[Operation] = []
        frags: dict[str, list[Selection]] = {}
        while self.peek()[0] != "eof":
            tok = self.peek()[1]
            if tok == "{":
                ops.append(Operation("query", "", {}, self.selection_set()))
            elif tok == "fragment":
                self.take()
                name = self.take()
                self.take("on")
                self.take()
                self.directives()
                frags[name] = self.selection_set()
            elif tok in ("query", "mutation", "subscription"):
                kind = self.take()
                name = self.take() if self.peek()[0] == "name" else ""
                defaults = self.variable_defs()
                self.directives()
                ops.append(Operation(kind, name, defaults, self.selection_set()))
            else:
                raise GraphQLSyntaxError(f"Syntax Error: unexpected {tok!r}")
        return Document(ops, frags)

    def variable_defs(self) -> dict[str, Any]:
        defaults: dict[str, Any] = {}
        if not self.skip("("):
            return defaults
        while not self.skip(")"):
            self.take("$")
            name = self.take()
            self.take(":")
            self.type_ref()
            if self.skip("="):
                defaults[name] = self.value()
            self.directives()
        return defaults

    def type_ref(self) -> None:
        if self.skip("["):
            self.type_ref()
            self.take("]")
        else:
            self.take()
        self.skip("!")

    def directives(self) -> list[tuple[str, dict[str, Any]]]:
        out = []
        while self.skip("@"):
            name = self.take()
            out.append((name, self.arguments()))
        return out

    def arguments(self) -> dict[str, Any]:
        args: dict[str, Any] = {}
        if self.skip("("):
            while not self.skip(")"):
                name = self.take()
                self.take(":")
                args[name] = self.value()
        return args

    def selection_set(self) -> list[Selection]:
        self.take("{")
        out: list[Selection] = []
        while not self.skip("}"):
            if self.peek()[0] == "spread":
                self.take()
                if self.peek()[1] == "on":
                    self.take()
                    self.take()
                    dirs = self.directives()
                    out.append(Spread("", self.selection_set(), dirs))
                elif self.peek()[1] in ("{", "@"):
                    dirs = self.directives()
                    out.append(Spread("", self.selection_set(), dirs))
                else:
                    name = self.take()
                    out.append(Spread(name, None, self.directives()))
                continue
            name = self.take()
            alias = name
            if self.skip(":"):
                name = self.take()
            args = self.arguments()
            dirs = self.directives()
            sels = self.selection_set() if self.peek()[1] == "{" else None
            out.append(Field(name, alias, args, sels, dirs))
        return out

    def value(self) -> Any:
        kind, tok = self.peek()
        if tok == "$" and kind == "punct":
            self.take()
            return _Var(self.take())
        if tok == "[" and kind == "punct":
            self.take()
            items = []
            while not self.skip("]"):
                items.append(self.value())
            return items
        if tok == "{" and kind == "punct":
            self.take()
            obj = {}
            while not self.skip("}"):
                key = self.take()
                self.take(":")
                obj[key] = self.value()
            return obj
        self.take()
        if kind == "num":
            return float(tok) if any(c in tok for c in ".eE") else int(tok)
        if kind == "str":
            import json

            return json.loads(tok)
        if kind == "block":
            return tok[3:-3]
        if kind == "name":
            return {"true": True, "false": False, "null": None}.get(tok, tok)
        raise GraphQLSyntaxError(f"Syntax Error: unexpected {tok!r}")


def parse(text: str) -> Document:
    return _Parser(text).document()


def _subst(value: Any, variables: Mapping[str, Any]) -> Any:
    if isinstance(value, _Var):
        return variables.get(value.name)
    if isinstance(value, list):
        return [_subst(v, variables) for v in value]
    if isinstance(value, dict):
        return {k: _subst(v, variables) for k, v in value.items()}
    return value


Resolver = Callable[[dict[str, Any]], Any]


@dataclass
class _Ctx:
    variables: dict[str, Any]
    fragments: dict[str, list[Selection]]


def _included(dirs: list[tuple[str, dict[str, Any]]], ctx: _Ctx) -> bool:
    for name, args in dirs:
        cond = bool(_subst(args.get("if"), ctx.variables))
        if (name == "skip" and cond) or (name == "include" and not cond):
            return False
    return True


def _fields(sels: list[Selection], ctx: _Ctx) -> list[Field]:
    out: list[Field] = []
    for sel in sels:
        if not _included(sel.directives, ctx):
            continue
        if isinstance(sel, Field):
            out.append(sel)
        else:
            inner = sel.selections if sel.name == "" else ctx.fragments.get(sel.name, [])
            out.extend(_fields(inner or [], ctx))
    return out


def _complete(value: Any, sels: list[Selection] | None, ctx: _Ctx) -> Any:
    if value is None:
        return None
    if isinstance(value, (list, tuple)):
        return [_complete(v, sels, ctx) for v in value]
    if sels is None:
        return value
    if not isinstance(value, Mapping):
        return value
    out: dict[str, Any] = {}
    for f in _fields(sels, ctx):
        raw = value.get(f.name)
        if callable(raw):
            raw = raw(_subst(f.args, ctx.variables))
        sub = _complete(raw, f.selections, ctx)
        if f.alias in out and isinstance(out[f.alias], dict) and isinstance(sub, dict):
            out[f.alias].update(sub)  # the same field selected twice (fragments): merge
        else:
            out[f.alias] = sub
    return out


def execute(
    doc: Document,
    root: Mapping[str, Any],
    variables: Mapping[str, Any] | None,
    operation_name: str | None = None,
) -> dict[str, Any]:
    """Run the operation against ``root`` (``{"query": {...}, "mutation": {...}}``)."""
    ops = doc.operations
    op = next((o for o in ops if o.name == operation_name), None) if operation_name else None
    if op is None:
        if not ops:
            raise GraphQLSyntaxError("the document holds no operation")
        op = ops[0]
    ctx = _Ctx({**op.defaults, **(variables or {})}, doc.fragments)
    data = _complete(root.get(op.kind, {}), op.selections, ctx)
    return data if isinstance(data, dict) else {}


def unknown_roots(
    doc: Document, root: Mapping[str, Any], operation_name: str | None = None
) -> list[str]:
    """Root fields of the operation the emulator does not serve (they answer null)."""
    ops = [o for o in doc.operations if not operation_name or o.name == operation_name]
    if not ops:
        return []
    op = ops[0]
    known = root.get(op.kind, {})
    ctx = _Ctx(dict(op.defaults), doc.fragments)
    return [f"{op.kind}.{f.name}" for f in _fields(op.selections, ctx) if f.name not in known]
