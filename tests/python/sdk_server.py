"""A server built with the official Python MCP SDK (`mcp` on PyPI, the version pinned in
`.ci/install-peers.sh`), for the harness's tests in `tests/tests/python_sdk.rs`.

Since mcp 2.0 the SDK's high-level server is `mcp.server.mcpserver.MCPServer` (FastMCP renamed;
`mcp.server.fastmcp` only raises an error that says so). Nothing here is hand-written JSON-RPC:
every message is the SDK's own.

    python sdk_server.py [--transport stdio|streamable-http] [--port N] [--marker TEXT]

Streamable HTTP binds 127.0.0.1 only and serves `/mcp`. `--marker` is ignored: it only puts a
text in the command line that a test can look for among live processes.

Tools: `add` (structured output, so it has an outputSchema), `fail` (raises: an isError
result), `slow_progress` (reports progress `steps` times, then returns "done"), `add_tool`
(registers a tool `added_N` and sends notifications/tools/list_changed). Prompt `greet`,
static text resource `py://readme`.
"""

import argparse

import anyio
from mcp.server.mcpserver import Context, MCPServer
from mcp.server.mcpserver.exceptions import ToolError

README = "This server is built with the official Python MCP SDK."

server = MCPServer("py-sdk-test", version="1")
added = 0


@server.tool()
def add(a: int, b: int) -> int:
    """Adds two integers."""
    return a + b


@server.tool()
def fail() -> str:
    """Always fails."""
    # `ToolError` is the SDK's "this tool failed" exception: its message becomes the text of the
    # isError result. Any other exception is logged as a crash and its message is replaced by
    # "Error executing tool fail".
    raise ToolError("fail was asked to fail")


@server.tool()
async def slow_progress(steps: int, ctx: Context, delay_ms: int = 20) -> str:
    """Reports progress `steps` times (1..steps of steps), `delay_ms` apart, then returns "done"."""
    for step in range(1, steps + 1):
        await anyio.sleep(delay_ms / 1000)
        await ctx.report_progress(step, steps, f"step {step}")
    return "done"


@server.tool()
async def add_tool(ctx: Context) -> str:
    """Registers a new tool `added_N` and tells the client the tool list changed."""
    global added
    added += 1
    name = f"added_{added}"

    def made() -> str:
        return f"{name} ran"

    server.add_tool(made, name=name, description=f"made at run time by add_tool ({name})")
    # Handshake-era protocols (the `initialize` ones): a notification on the connection's
    # standalone channel (the stdio pipe, or the Streamable HTTP GET stream).
    await ctx.session.send_tool_list_changed()
    # 2026-07-28 and later: change notifications go only to `subscriptions/listen` streams.
    await ctx.notify_tools_changed()
    return name


@server.prompt()
def greet(name: str) -> str:
    """Greets someone by name."""
    return f"Hello, {name}! Greetings from the Python SDK."


@server.resource("py://readme", name="readme", mime_type="text/plain")
def readme() -> str:
    """What this server is."""
    return README


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--transport", choices=["stdio", "streamable-http"], default="stdio")
    parser.add_argument("--port", type=int, default=8000)
    parser.add_argument("--marker", default="")
    opts = parser.parse_args()
    if opts.transport == "stdio":
        server.run("stdio")
    else:
        server.run("streamable-http", host="127.0.0.1", port=opts.port)


if __name__ == "__main__":
    main()
