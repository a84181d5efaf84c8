"""A stdio MCP server of the 2025-06-18 era that answers tools/call with an SEP-2322
`input_required` result, which its era does not have. A second tools/call (a client that went on
with a further round anyway) is answered with a plain result, so a test can tell the two apart.
Raw JSON-RPC, no SDK: the point is a server that breaks its own protocol version."""

import json
import sys

calls = 0
for line in sys.stdin:
    message = json.loads(line)
    if "id" not in message:
        continue
    method = message.get("method")
    if method == "initialize":
        result = {
            "protocolVersion": "2025-06-18",
            "capabilities": {"tools": {}},
            "serverInfo": {"name": "old-era", "version": "1"},
        }
    elif method == "tools/list":
        result = {"tools": [{"name": "ask", "inputSchema": {"type": "object"}}]}
    elif method == "tools/call":
        calls += 1
        if calls == 1:
            result = {"resultType": "input_required", "requestState": "state-1"}
        else:
            result = {"content": [{"type": "text", "text": "second round"}]}
    else:
        reply = {"code": -32601, "message": f"no {method}"}
        print(json.dumps({"jsonrpc": "2.0", "id": message["id"], "error": reply}), flush=True)
        continue
    print(json.dumps({"jsonrpc": "2.0", "id": message["id"], "result": result}), flush=True)
