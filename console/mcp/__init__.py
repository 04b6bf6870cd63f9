"""`phantom mcp`: the console's actions and reads for AI agents, over the Model Context
Protocol (the official ``mcp`` SDK, stdio or streamable HTTP on loopback).

One tool per command (``console.commands``) that MCP offers, its input schema from the
command's typed arguments; a resource per command that stands as a document (status, events,
incidents, the ledger); two prompts. A call binds the agent's JSON to the command's arguments
and runs it: the script's parser is never involved.
Read-only unless the operator allows more (``policy``); every call journaled by ``mcp``.
"""
