"""On the path of every `phantom mcp` a test starts (``mcp_client.mcp_env``): the script's
parser cannot be imported there. The MCP front end binds an agent's JSON to the commands
itself (issue 43), so every MCP test passes with the parser made to raise."""

from __future__ import annotations

import sys
from collections.abc import Sequence
from importlib.machinery import ModuleSpec
from types import ModuleType


class _ScriptParserRaises:
    def find_spec(
        self, name: str, path: Sequence[str] | None = None, target: ModuleType | None = None
    ) -> ModuleSpec | None:
        if name == "console.script.parse":
            raise ImportError("the MCP server reached for the script's parser")
        return None


sys.meta_path.insert(0, _ScriptParserRaises())
