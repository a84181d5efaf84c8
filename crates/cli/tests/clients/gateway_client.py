"""Drives `mcp-harness serve` with the official Python MCP SDK client, as a host would.

Usage: gateway_client.py stdio MCP_HARNESS CONFIG | gateway_client.py http URL
Prints one JSON object per step on stdout (`{"step": ..., ...}`); the Rust test asserts on them.
Every wait is bounded.
"""
import json
import sys

import anyio
from mcp import ClientSession, StdioServerParameters, types
from mcp.client.stdio import stdio_client
from mcp.client.streamable_http import streamable_http_client


def out(step, **fields):
    print(json.dumps({"step": step, **fields}), flush=True)


def text(result):
    return "\n".join(getattr(block, "text", "") for block in result.content)


async def scenario(read, write):
    changed = anyio.Event()
    updated = anyio.Event()

    async def on_message(message):
        method = getattr(getattr(message, "root", message), "method", None)
        if method == "notifications/tools/list_changed":
            changed.set()
        if method == "notifications/resources/updated":
            updated.set()

    asked = []

    async def on_elicit(context, params):
        asked.append(params.message)
        if params.message.startswith("Allow `"):
            return types.ElicitResult(action="accept", content={})
        return types.ElicitResult(action="accept", content={"name": "Ada Gateway", "check": True})

    async with ClientSession(read, write, message_handler=on_message,
                             elicitation_callback=on_elicit) as s:
        await s.initialize()
        names = []
        with anyio.move_on_after(30):
            while not {"mcp__fx__echo", "mcp__ev__echo", "mcp__py__add"} <= set(names):
                names = [t.name for t in (await s.list_tools()).tools]
                if not {"mcp__fx__echo", "mcp__ev__echo", "mcp__py__add"} <= set(names):
                    await anyio.sleep(0.2)
        out("tools", names=names)

        echo = await s.call_tool("mcp__fx__echo", {"message": "hello gateway"})
        out("echo", text=text(echo), is_error=bool(echo.is_error))
        add = await s.call_tool("mcp__py__add", {"a": 2, "b": 3})
        out("py_add", text=text(add), structured=add.structured_content, is_error=bool(add.is_error))

        prompts = [p.name for p in (await s.list_prompts()).prompts]
        greeting = await s.get_prompt("mcp__fx__greeting", {"name": "Ada"})
        out("prompts", names=prompts, greeting=str(greeting.messages[0].content))

        resources = [r.uri for r in (await s.list_resources()).resources]
        templates = [t.uri_template for t in (await s.list_resource_templates()).resource_templates]
        read = await s.read_resource("fixture://static/readme")
        item = await s.read_resource("fixture://items/7")
        out("resources", uris=[str(u) for u in resources], templates=templates,
            read=getattr(read.contents[0], "text", None), item=getattr(item.contents[0], "text", None))

        changed = anyio.Event()
        await s.call_tool("mcp__fx__add_tool", {"name": "gateway_dyn"})
        with anyio.move_on_after(15):
            await changed.wait()
        names = [t.name for t in (await s.list_tools()).tools]
        out("list_changed", notified=changed.is_set(), listed="mcp__fx__gateway_dyn" in names)

        progress = []

        async def on_progress(done, total, message):
            progress.append(done)

        slow = await s.call_tool("mcp__fx__slow", {"ms": 700}, progress_callback=on_progress)
        out("progress", values=progress, is_error=bool(slow.is_error))

        with anyio.move_on_after(1.0):
            await s.call_tool("mcp__fx__slow", {"ms": 20000})
        cancelled = []
        with anyio.move_on_after(10):
            while not cancelled:
                raw = text(await s.call_tool("mcp__fx__cancellations", {}))
                try:
                    report = json.loads(raw)
                except ValueError:
                    out("cancel_report", raw=raw)
                    raise
                cancelled = report["cancelled"]
                if not cancelled:
                    await anyio.sleep(0.1)
        out("cancel", cancelled=cancelled)

        # Stale: list at version 1, the server moves the tool to version 2, call without
        # listing again.
        changed = anyio.Event()
        await s.call_tool("mcp__fx__mutate_tool", {"name": "versioned", "version": 1})
        with anyio.move_on_after(15):
            await changed.wait()
        await s.list_tools()
        changed = anyio.Event()
        await s.call_tool("mcp__fx__mutate_tool", {"name": "versioned", "version": 2})
        with anyio.move_on_after(15):
            await changed.wait()
        stale = await s.call_tool("mcp__fx__versioned", {})
        await s.list_tools()
        fresh = await s.call_tool("mcp__fx__versioned", {})
        out("stale", stale=text(stale), stale_error=bool(stale.is_error),
            fresh=text(fresh), fresh_error=bool(fresh.is_error))

        completion = await s.complete(
            types.PromptReference(type="ref/prompt", name="mcp__ev__completable-prompt"),
            {"name": "department", "value": "Eng"})
        out("complete", values=completion.completion.values)

        await s.subscribe_resource("fixture://static/readme")
        await s.call_tool("mcp__fx__update_resource", {"uri": "fixture://static/readme", "text": "v2"})
        with anyio.move_on_after(15):
            await updated.wait()
        out("subscribe", updated=updated.is_set())

        elicited = await s.call_tool("mcp__ev__trigger-elicitation-request", {})
        out("elicit", text=text(elicited), is_error=bool(elicited.is_error))
        approved = await s.call_tool("mcp__fx__add", {"a": 2, "b": 3})
        out("approval", text=text(approved), is_error=bool(approved.is_error), asked=asked)

        try:
            await s.call_tool("mcp__fx__no_such_tool", {})
            out("unknown", error=None)
        except Exception as e:  # the SDK raises on a JSON-RPC error
            out("unknown", error=str(e))


async def main():
    if sys.argv[1] == "stdio":
        params = StdioServerParameters(command=sys.argv[2], args=["--config", sys.argv[3], "serve"])
        async with stdio_client(params) as (read, write):
            await scenario(read, write)
    else:
        async with streamable_http_client(sys.argv[2]) as streams:
            await scenario(streams[0], streams[1])
    out("done")


anyio.run(main)
