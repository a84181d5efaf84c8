// Drives `mcp-harness serve` with the official TypeScript MCP SDK client, as a host would.
//
// Usage: node gateway_client.mjs SDK_DIR stdio MCP_HARNESS CONFIG
//        node gateway_client.mjs SDK_DIR http URL
// SDK_DIR is the installed @modelcontextprotocol/sdk package. Prints one JSON object per step on
// stdout; the Rust test asserts on them. Every wait is bounded.
const [sdk, mode, target, config] = process.argv.slice(2);
const { Client } = await import(`${sdk}/dist/esm/client/index.js`);
const { StdioClientTransport } = await import(`${sdk}/dist/esm/client/stdio.js`);
const { StreamableHTTPClientTransport } = await import(`${sdk}/dist/esm/client/streamableHttp.js`);
const { ToolListChangedNotificationSchema, ElicitRequestSchema, ResourceUpdatedNotificationSchema } = await import(
  `${sdk}/dist/esm/types.js`
);

const out = (step, fields = {}) => console.log(JSON.stringify({ step, ...fields }));
const text = (result) => result.content.map((b) => b.text ?? "").join("\n");
const sleep = (ms) => new Promise((r) => setTimeout(r, ms));
const within = (ms, promise) => Promise.race([promise, sleep(ms).then(() => undefined)]);

const client = new Client(
  { name: "gateway-test-ts", version: "1.0.0" },
  { capabilities: { elicitation: { form: {} } } },
);
const asked = [];
client.setRequestHandler(ElicitRequestSchema, async (request) => {
  const message = request.params.message;
  asked.push(message);
  if (message.startsWith("Allow `")) return { action: "accept", content: {} };
  return { action: "accept", content: { name: "Ada Gateway", check: true } };
});
let changed;
let notify = () => {};
client.setNotificationHandler(ToolListChangedNotificationSchema, () => notify());
const listChanged = () => {
  changed = false;
  return new Promise((resolve) => {
    notify = () => {
      changed = true;
      resolve();
    };
  });
};

const transport =
  mode === "stdio"
    ? new StdioClientTransport({ command: target, args: ["--config", config, "serve"], stderr: "inherit" })
    : new StreamableHTTPClientTransport(new URL(target));
await client.connect(transport);

const wanted = ["mcp__fx__echo", "mcp__ev__echo", "mcp__py__add"];
let names = [];
for (let i = 0; i < 150 && !wanted.every((n) => names.includes(n)); i++) {
  names = (await client.listTools()).tools.map((t) => t.name);
  if (!wanted.every((n) => names.includes(n))) await sleep(200);
}
out("tools", { names });

const echo = await client.callTool({ name: "mcp__fx__echo", arguments: { message: "hello gateway" } });
out("echo", { text: text(echo), is_error: !!echo.isError });
const add = await client.callTool({ name: "mcp__py__add", arguments: { a: 2, b: 3 } });
out("py_add", { text: text(add), structured: add.structuredContent ?? null, is_error: !!add.isError });

const prompts = (await client.listPrompts()).prompts.map((p) => p.name);
const greeting = await client.getPrompt({ name: "mcp__fx__greeting", arguments: { name: "Ada" } });
out("prompts", { names: prompts, greeting: JSON.stringify(greeting.messages[0].content) });

const uris = (await client.listResources()).resources.map((r) => r.uri);
const templates = (await client.listResourceTemplates()).resourceTemplates.map((t) => t.uriTemplate);
const read = await client.readResource({ uri: "fixture://static/readme" });
const item = await client.readResource({ uri: "fixture://items/7" });
out("resources", { uris, templates, read: read.contents[0].text, item: item.contents[0].text });

let wait = listChanged();
await client.callTool({ name: "mcp__fx__add_tool", arguments: { name: "gateway_dyn" } });
await within(15000, wait);
names = (await client.listTools()).tools.map((t) => t.name);
out("list_changed", { notified: changed, listed: names.includes("mcp__fx__gateway_dyn") });

const progress = [];
const slow = await client.callTool({ name: "mcp__fx__slow", arguments: { ms: 700 } }, undefined, {
  onprogress: (p) => progress.push(p.progress),
});
out("progress", { values: progress, is_error: !!slow.isError });

const abort = new AbortController();
const cancelled_call = client
  .callTool({ name: "mcp__fx__slow", arguments: { ms: 20000 } }, undefined, { signal: abort.signal })
  .catch(() => undefined);
await sleep(1000);
abort.abort("cancelled by the test");
await cancelled_call;
let cancelled = [];
for (let i = 0; i < 100 && cancelled.length === 0; i++) {
  const raw = text(await client.callTool({ name: "mcp__fx__cancellations", arguments: {} }));
  cancelled = JSON.parse(raw).cancelled;
  if (cancelled.length === 0) await sleep(100);
}
out("cancel", { cancelled });

wait = listChanged();
await client.callTool({ name: "mcp__fx__mutate_tool", arguments: { name: "versioned", version: 1 } });
await within(15000, wait);
await client.listTools();
wait = listChanged();
await client.callTool({ name: "mcp__fx__mutate_tool", arguments: { name: "versioned", version: 2 } });
await within(15000, wait);
const stale = await client.callTool({ name: "mcp__fx__versioned", arguments: {} });
await client.listTools();
const fresh = await client.callTool({ name: "mcp__fx__versioned", arguments: {} });
out("stale", { stale: text(stale), stale_error: !!stale.isError, fresh: text(fresh), fresh_error: !!fresh.isError });

const completion = await client.complete({
  ref: { type: "ref/prompt", name: "mcp__ev__completable-prompt" },
  argument: { name: "department", value: "Eng" },
});
out("complete", { values: completion.completion.values });

let updated = false;
const update = new Promise((resolve) =>
  client.setNotificationHandler(ResourceUpdatedNotificationSchema, () => {
    updated = true;
    resolve();
  }),
);
await client.subscribeResource({ uri: "fixture://static/readme" });
await client.callTool({ name: "mcp__fx__update_resource", arguments: { uri: "fixture://static/readme", text: "v2" } });
await within(15000, update);
out("subscribe", { updated });

const elicited = await client.callTool({ name: "mcp__ev__trigger-elicitation-request", arguments: {} });
out("elicit", { text: text(elicited), is_error: !!elicited.isError });
const approved = await client.callTool({ name: "mcp__fx__add", arguments: { a: 2, b: 3 } });
out("approval", { text: text(approved), is_error: !!approved.isError, asked });

try {
  await client.callTool({ name: "mcp__fx__no_such_tool", arguments: {} });
  out("unknown", { error: null });
} catch (e) {
  out("unknown", { error: String(e.message ?? e) });
}
await client.close();
out("done");
