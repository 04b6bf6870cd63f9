"""`phantom mcp`: the console's actions and reads for AI agents, over the Model Context
Protocol (the official ``mcp`` SDK, stdio or streamable HTTP on loopback).

One tool per row of ``console.services.action_table`` that names MCP, its input schema from
the row's arguments; resources for status, events, incidents and the ledger; two prompts.
Read-only unless the operator allows more (``policy``); every call journaled by ``mcp``.
"""
