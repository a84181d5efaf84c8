// Drives gateway replicas behind a load balancer with the official TypeScript MCP SDK client
// (protocol 2025-11-25, sessions), as several hosts would.
//
// Usage: node scale_client.mjs SDK_DIR URL SESSIONS CALLS
// Opens SESSIONS sessions (client names lb-0, lb-1, ...), checks that a tools/list_changed
// after an upstream change reaches every one, then runs three phases of CALLS sequential echo
// calls per session, all sessions at once: `before`, `during` (it prints {"step":"kill_now"}
// after a few calls, when the test kills a replica) and `after`. Prints one JSON object per
// step on stdout, figures last; every wait is bounded.
const [sdk, url, sessionsArg, callsArg] = process.argv.slice(2);
const { Client } = await import(`${sdk}/dist/esm/client/index.js`);
const { StreamableHTTPClientTransport } = await import(`${sdk}/dist/esm/client/streamableHttp.js`);
const { ToolListChangedNotificationSchema } = await import(`${sdk}/dist/esm/types.js`);

const SESSIONS = Number(sessionsArg);
const CALLS = Number(callsArg);
const out = (step, fields = {}) => console.log(JSON.stringify({ step, ...fields }));
const sleep = (ms) => new Promise((r) => setTimeout(r, ms));
const text = (result) => result.content.map((b) => b.text ?? "").join("\n");

const sessions = [];
for (let i = 0; i < SESSIONS; i++) {
  const client = new Client({ name: `lb-${i}`, version: "1.0.0" }, { capabilities: {} });
  const session = { client, changed: 0 };
  client.setNotificationHandler(ToolListChangedNotificationSchema, () => {
    session.changed += 1;
  });
  await client.connect(new StreamableHTTPClientTransport(new URL(url)));
  sessions.push(session);
}
for (const { client } of sessions) {
  let names = [];
  for (let n = 0; n < 100 && !names.includes("mcp__fx__echo"); n++) {
    names = (await client.listTools()).tools.map((t) => t.name);
    if (!names.includes("mcp__fx__echo")) await sleep(100);
  }
}
out("connected", { sessions: sessions.length });

// The GET streams open in the background: give them a moment before the change.
await sleep(1000);
await sessions[0].client.callTool({ name: "mcp__fx__add_tool", arguments: { name: "lb_dyn" } });
for (let n = 0; n < 150 && sessions.some((s) => s.changed === 0); n++) await sleep(100);
out("list_changed", { notified: sessions.filter((s) => s.changed > 0).length, sessions: sessions.length });
for (const { client } of sessions) await client.listTools();

/// What a failure was, for the figures.
function classify(error) {
  const message = String(error?.message ?? error);
  if (/session not found|HTTP 404/i.test(message)) return ["session_not_found", message];
  if (/HTTP 5\d\d/.test(message)) return ["http_5xx", message];
  if (/timed out|timeout/i.test(message)) return ["timeout", message];
  if (/fetch failed|ECONNRESET|ECONNREFUSED|socket|terminated|network|aborted|SSE stream disconnected/i.test(message))
    return ["connection", message];
  return ["other", message];
}

let attempted = 0;
async function phase(name, onProgress) {
  const latencies = [];
  const failures = {};
  const samples = {};
  let ok = 0;
  let done = 0;
  await Promise.all(
    sessions.map(async ({ client }, i) => {
      for (let n = 0; n < CALLS; n++) {
        const message = `${name}-s${i}-c${n}`;
        const started = performance.now();
        attempted += 1;
        try {
          const result = await client.callTool({ name: "mcp__fx__echo", arguments: { message } }, undefined, {
            timeout: 10000,
          });
          if (result.isError || text(result) !== message) {
            failures.tool_error = (failures.tool_error ?? 0) + 1;
            samples.tool_error ??= text(result).slice(0, 300);
          } else {
            ok += 1;
            latencies.push(performance.now() - started);
          }
        } catch (error) {
          const [kind, detail] = classify(error);
          failures[kind] = (failures[kind] ?? 0) + 1;
          samples[kind] ??= detail.slice(0, 300);
        }
        done += 1;
        onProgress?.(done);
      }
    }),
  );
  latencies.sort((a, b) => a - b);
  const pct = (p) => (latencies.length ? Number(latencies[Math.min(latencies.length - 1, Math.floor(p * latencies.length))].toFixed(2)) : null);
  return { calls: SESSIONS * CALLS, ok, failures, samples, p50_ms: pct(0.5), p99_ms: pct(0.99) };
}

const figures = {};
figures.before = await phase("before");
out("before", figures.before);
let told = false;
figures.during = await phase("during", (done) => {
  if (!told && done >= SESSIONS * 2) {
    told = true;
    out("kill_now");
  }
});
await sleep(1500);
figures.after = await phase("after");

// A change after the kill reaches every session too: streams that were on the killed replica
// reconnect to another one.
for (const session of sessions) session.changed = 0;
await sessions[0].client.callTool({ name: "mcp__fx__add_tool", arguments: { name: "lb_dyn_after" } });
for (let n = 0; n < 150 && sessions.some((s) => s.changed === 0); n++) await sleep(100);
out("list_changed_after_kill", { notified: sessions.filter((s) => s.changed > 0).length, sessions: sessions.length });

let upstream = null;
for (let n = 0; n < 5 && upstream === null; n++) {
  try {
    const counts = JSON.parse(text(await sessions[0].client.callTool({ name: "mcp__fx__calls", arguments: {} })));
    upstream = counts.echo ?? 0;
  } catch {
    await sleep(200);
  }
}
out("figures", { phases: figures, attempted, upstream_echo_calls: upstream });
for (const { client } of sessions) await client.close().catch(() => {});
out("done");
