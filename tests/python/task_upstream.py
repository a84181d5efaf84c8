#!/usr/bin/env python3
"""A scripted stdio MCP server (2025-11-25) running SEP-1686 tasks the way some servers do.

What the official SDKs' servers do not do, and the gateway must survive:
- a task asks its client for input (`elicitation/create` naming the task in related-task
  `_meta`) on its own schedule, whether or not the client awaits `tasks/result`;
- a task may announce itself (`notifications/tasks/status`) before its `CreateTaskResult`;
- task ids are numbered from 1 in each process (`T1`, `T2`, ...), so a restarted server hands
  out the ids of its previous process again.

Tools: `work` (`secs`, `who`; `ask`: ask for input after `ask_after` seconds; `announce`),
`sleep` (`secs`). The process writes its pid to the file named by `TASK_UPSTREAM_PID`.
"""
import itertools
import json
import os
import sys
import threading
import time

RELATED = "io.modelcontextprotocol/related-task"
write_lock = threading.Lock()
pending = {}
tasks = {}
request_ids = itertools.count(1)
task_ids = itertools.count(1)


def send(message):
    with write_lock:
        sys.stdout.write(json.dumps(message) + "\n")
        sys.stdout.flush()


def now():
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())


def ask(method, params, timeout=30):
    """Sends the client a request; its result, or {"error": ...}."""
    rid = "up-%d" % next(request_ids)
    slot = [threading.Event(), None]
    pending[rid] = slot
    send({"jsonrpc": "2.0", "id": rid, "method": method, "params": params})
    if not slot[0].wait(timeout):
        return {"error": "no answer within %ss" % timeout}
    return slot[1]


def view(task):
    shown = {k: task[k] for k in ("taskId", "status", "createdAt", "lastUpdatedAt", "ttl")}
    shown["pollInterval"] = 250
    if task.get("statusMessage"):
        shown["statusMessage"] = task["statusMessage"]
    return shown


def set_status(task, status, message=None):
    task["status"] = status
    task["lastUpdatedAt"] = now()
    if message:
        task["statusMessage"] = message
    send({"jsonrpc": "2.0", "method": "notifications/tasks/status", "params": view(task)})


def text(body, task_id=None):
    result = {"content": [{"type": "text", "text": body}], "isError": False}
    if task_id:
        result["_meta"] = {RELATED: {"taskId": task_id}}
    return result


TOOLS = [
    {"name": "work", "description": "Work that may run as a task.",
     "inputSchema": {"type": "object", "properties": {
         "who": {"type": "string"}, "secs": {"type": "number"}, "ask": {"type": "boolean"},
         "ask_after": {"type": "number"}, "announce": {"type": "boolean"}}},
     "execution": {"taskSupport": "optional"}},
    {"name": "sleep", "description": "Sleeps `secs` seconds.",
     "inputSchema": {"type": "object", "properties": {"secs": {"type": "number"}}}},
]


def run_task(task, args):
    answer = None
    if args.get("ask"):
        time.sleep(float(args.get("ask_after", 0.2)))
        set_status(task, "input_required", "need input")
        answer = ask("elicitation/create", {
            "mode": "form", "message": "task %s of %s asks" % (task["taskId"], args.get("who")),
            "requestedSchema": {"type": "object", "properties": {"x": {"type": "string"}}},
            "_meta": {RELATED: {"taskId": task["taskId"]}}})
        if task["status"] == "cancelled":
            return
        set_status(task, "working")
    time.sleep(float(args.get("secs", 0.1)))
    if task["status"] == "cancelled":
        return
    body = "result of %s for %s; answer=%s" % (task["taskId"], args.get("who"), json.dumps(answer))
    task["result"] = text(body, task["taskId"])
    set_status(task, "completed")
    task["done"].set()


def call_tool(rid, params):
    name = params.get("name")
    args = params.get("arguments") or {}
    if "task" in params and name == "work":
        task = {"taskId": "T%d" % next(task_ids), "status": "working", "createdAt": now(),
                "lastUpdatedAt": now(), "ttl": params["task"].get("ttl", 60000),
                "done": threading.Event()}
        tasks[task["taskId"]] = task
        if args.get("announce"):
            set_status(task, "working", "announced for %s" % args.get("who"))
            time.sleep(0.05)
        send({"jsonrpc": "2.0", "id": rid, "result": {"task": view(task)}})
        threading.Thread(target=run_task, args=(task, args), daemon=True).start()
        return None
    if name in ("work", "sleep"):
        time.sleep(float(args.get("secs", 0.1)))
        return text("%s done for %s" % (name, args.get("who")))
    raise KeyError(name)


def handle(message):
    method = message.get("method")
    rid = message.get("id")
    params = message.get("params") or {}
    if method is None:
        slot = pending.pop(rid, None)
        if slot:
            slot[1] = message.get("result", {"error": message.get("error")})
            slot[0].set()
        return
    if rid is None:
        return
    try:
        if method == "initialize":
            result = {"protocolVersion": "2025-11-25",
                      "capabilities": {"tools": {}, "tasks": {
                          "cancel": {}, "requests": {"tools": {"call": {}}}}},
                      "serverInfo": {"name": "task-upstream", "version": "1"}}
        elif method == "ping":
            result = {}
        elif method == "tools/list":
            result = {"tools": TOOLS}
        elif method == "tools/call":
            result = call_tool(rid, params)
            if result is None:
                return
        elif method == "tasks/get":
            result = view(tasks[params["taskId"]])
        elif method == "tasks/result":
            task = tasks[params["taskId"]]
            task["done"].wait(60)
            result = task.get("result") or {"content": [], "isError": True}
        elif method == "tasks/cancel":
            task = tasks[params["taskId"]]
            set_status(task, "cancelled")
            task["done"].set()
            result = view(task)
        else:
            send({"jsonrpc": "2.0", "id": rid,
                  "error": {"code": -32601, "message": "method not found: " + method}})
            return
        send({"jsonrpc": "2.0", "id": rid, "result": result})
    except KeyError as unknown:
        send({"jsonrpc": "2.0", "id": rid,
              "error": {"code": -32602, "message": "unknown %s" % unknown}})


def main():
    pid_file = os.environ.get("TASK_UPSTREAM_PID")
    if pid_file:
        with open(pid_file, "w") as f:
            f.write(str(os.getpid()))
    for line in sys.stdin:
        line = line.strip()
        if not line:
            continue
        try:
            message = json.loads(line)
        except ValueError:
            continue
        threading.Thread(target=handle, args=(message,), daemon=True).start()


if __name__ == "__main__":
    main()
