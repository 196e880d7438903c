// A client for the specs made with the official MCP TypeScript SDK
// (@modelcontextprotocol/sdk, pinned in .ci/deps): it starts a server over
// stdio, runs a list of steps and prints one JSON object with each step's
// answer and its wall-clock times, so that a spec can run the same steps
// against a server directly and through `specula gateway` and compare.
//
//   node mcp_sdk_driver.js PLAN.json
//
// PLAN: { command, args, env (added to the driver's), cwd | url (Streamable
// HTTP: the SDK's StreamableHTTPClientTransport), capabilities
// (the client's), answers: { sampling, elicitation, roots } (what the client
// answers a server's request with; each declares its capability),
// steps: [ { op, ... } ] } with op one of
//   tools, resources, templates, prompts                 the lists
//   call { name, arguments, progress, abort_ms }           tools/call (progress: keep its notifications;
//                                                          abort_ms: give up after that long)
//   read { uri }   prompt { name, arguments }              resources/read, prompts/get
//   ping   sleep { ms }   level { level }                  logging/setLevel
//   exit { name, arguments, after_ms }                     tools/call, and the process exits after_ms
//                                                          later, the call unanswered (a client that dies)
// Output: { server: { name, version }, steps: [ { op, ok, result | error,
// sent_ms, recv_ms } ], notifications: [ { method, params } ] (logging),
// progress: [ { progress, total, message } ] }.
"use strict";
const fs = require("fs");
const path = require("path");

const cache = process.env.SPECULA_NPM_CACHE || path.join(process.env.HOME || "", ".cache/specula-npm");
const sdk = path.join(cache, "node_modules/@modelcontextprotocol/sdk/dist/cjs");
const { Client } = require(path.join(sdk, "client/index.js"));
const { StdioClientTransport } = require(path.join(sdk, "client/stdio.js"));
const { StreamableHTTPClientTransport } = require(path.join(sdk, "client/streamableHttp.js"));
const types = require(path.join(sdk, "types.js"));

const progress = [];

async function step(client, s) {
  switch (s.op) {
    case "tools": return client.listTools();
    case "resources": return client.listResources();
    case "templates": return client.listResourceTemplates();
    case "prompts": return client.listPrompts();
    case "call": {
      // progress: the server's notifications for this call are kept
      const opts = {};
      if (s.progress) opts.onprogress = (p) => progress.push(p);
      // abort_ms: the client gives up (the SDK sends notifications/cancelled)
      if (s.abort_ms) opts.signal = AbortSignal.timeout(s.abort_ms);
      return client.callTool({ name: s.name, arguments: s.arguments || {} }, undefined, opts);
    }
    case "read": return client.readResource({ uri: s.uri });
    case "prompt": return client.getPrompt({ name: s.name, arguments: s.arguments || {} });
    case "ping": return client.ping();
    case "level": return client.setLoggingLevel(s.level);
    case "sleep": await new Promise((r) => setTimeout(r, s.ms)); return {};
    case "exit": {
      client.callTool({ name: s.name, arguments: s.arguments || {} }).catch(() => {});
      await new Promise((r) => setTimeout(r, s.after_ms));
      process.stdout.write(JSON.stringify({ exited_ms: Date.now() }) + "\n");
      process.exit(0);
    }
    default: throw new Error("unknown op " + s.op);
  }
}

async function main() {
  const plan = JSON.parse(fs.readFileSync(process.argv[2], "utf8"));
  const env = Object.assign({}, process.env, plan.env || {});
  const transport = plan.url ? new StreamableHTTPClientTransport(new URL(plan.url))
    : new StdioClientTransport({ command: plan.command, args: plan.args || [], env, cwd: plan.cwd, stderr: "inherit" });
  const answers = plan.answers || {};
  const caps = Object.assign({}, plan.capabilities || {});
  if (answers.sampling) caps.sampling = {};
  if (answers.elicitation) caps.elicitation = {};
  if (answers.roots) caps.roots = { listChanged: true };
  const client = new Client({ name: "specula-spec-driver", version: "1.0.0" }, { capabilities: caps });
  const asked = [];
  const answer = (schema, what, reply) => client.setRequestHandler(schema, (req) => {
    asked.push({ method: req.method, params: req.params });
    return reply;
  });
  if (answers.sampling) answer(types.CreateMessageRequestSchema, "sampling", answers.sampling);
  if (answers.elicitation) answer(types.ElicitRequestSchema, "elicitation", answers.elicitation);
  if (answers.roots) answer(types.ListRootsRequestSchema, "roots", answers.roots);
  const notifications = [];
  client.setNotificationHandler(types.LoggingMessageNotificationSchema, (n) => {
    notifications.push({ method: n.method, params: n.params });
  });
  await client.connect(transport);
  const out = { server: client.getServerVersion(), steps: [], notifications, progress, asked,
                session: transport.sessionId };
  for (const s of plan.steps) {
    const rec = { op: s.op, sent_ms: Date.now() };
    try {
      rec.result = await step(client, s);
      rec.ok = true;
    } catch (e) {
      rec.ok = false;
      rec.error = { code: e.code, message: String(e.message) };
    }
    rec.recv_ms = Date.now();
    out.steps.push(rec);
  }
  // over HTTP a client that is done ends its session (DELETE), as the SDK's own examples do
  if (plan.url && !plan.keep_session) await transport.terminateSession().catch(() => {});
  await client.close();
  process.stdout.write(JSON.stringify(out) + "\n");
}

main().catch((e) => {
  process.stderr.write("driver: " + (e && e.stack || e) + "\n");
  process.exit(1);
});
