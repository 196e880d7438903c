// The official MCP TypeScript SDK's client (StreamableHTTPClientTransport)
// against an MCP server over Streamable HTTP (spec/mcp/serve_fixture.lua
// serves one on specula.mcp.serve_http), and raw fetches for the transport's
// refusals. Prints one JSON line of what it saw.
//   node mcp_http_client.mjs URL
const url = process.argv[2];
const base = (process.env.SPECULA_NPM_CACHE || (process.env.HOME + "/.cache/specula-npm")) +
  "/node_modules/@modelcontextprotocol/sdk/dist/esm/";
const { Client } = await import(base + "client/index.js");
const { StreamableHTTPClientTransport } = await import(base + "client/streamableHttp.js");
const { LoggingMessageNotificationSchema, ToolListChangedNotificationSchema } = await import(base + "types.js");

const out = {};
const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

async function connect(name) {
  const c = new Client({ name, version: "1" });
  const t = new StreamableHTTPClientTransport(new URL(url));
  const seen = { logs: [], listChanged: 0 };
  c.setNotificationHandler(LoggingMessageNotificationSchema, (n) => { seen.logs.push(n.params.data); });
  c.setNotificationHandler(ToolListChangedNotificationSchema, () => { seen.listChanged++; });
  await c.connect(t);
  return { c, t, seen };
}

const textOf = (r) => r.content && r.content[0] && r.content[0].text;

async function rawPost(body, headers) {
  const h = { "Content-Type": "application/json", Accept: "application/json, text/event-stream", ...headers };
  const r = await fetch(url, { method: "POST", headers: h, body: JSON.stringify(body) });
  return { status: r.status, ctype: r.headers.get("content-type"), body: await r.text() };
}

try {
  // one client, every kind of exchange
  const a = await connect("a");
  out.a = { session: a.t.sessionId, version: a.t.protocolVersion };
  out.a.tools = (await a.c.listTools()).tools.map((t) => t.name);
  out.a.echo = textOf(await a.c.callTool({ name: "echo", arguments: { text: "hi there" } }));
  out.a.ping = textOf(await a.c.callTool({ name: "ping_client", arguments: {} }));
  out.a.notify = textOf(await a.c.callTool({ name: "notify", arguments: {} }));
  for (let i = 0; i < 100 && a.seen.listChanged === 0; i++) await sleep(20);
  out.a.logs = a.seen.logs;
  out.a.listChanged = a.seen.listChanged;
  out.a.pingServer = JSON.stringify(await a.c.ping());
  out.a.unknownTool = await a.c.callTool({ name: "nope", arguments: {} }).then(() => "ok", (e) => String(e.message));

  // two clients at once, each its own session
  const [b, c] = await Promise.all([connect("b"), connect("c")]);
  out.two = { b: b.t.sessionId, c: c.t.sessionId };
  const [eb, ec] = await Promise.all([
    b.c.callTool({ name: "echo", arguments: { text: "from b" } }),
    c.c.callTool({ name: "echo", arguments: { text: "from c" } }),
  ]);
  out.two.echo = [textOf(eb), textOf(ec)];
  const [pb, pc] = await Promise.all([
    b.c.callTool({ name: "ping_client", arguments: {} }),
    c.c.callTool({ name: "ping_client", arguments: {} }),
  ]);
  out.two.ping = [textOf(pb), textOf(pc)];

  // DELETE ends b's session: its id is unknown from then on; c goes on
  await b.t.terminateSession();
  out.deleted = {};
  out.deleted.after = await rawPost({ jsonrpc: "2.0", id: 9, method: "tools/list" },
    { "Mcp-Session-Id": out.two.b, "MCP-Protocol-Version": out.a.version });
  out.deleted.other = textOf(await c.c.callTool({ name: "echo", arguments: { text: "still here" } }));

  // the transport's refusals
  const sid = { "Mcp-Session-Id": out.a.session };
  const list = { jsonrpc: "2.0", id: 7, method: "tools/list" };
  const r = {};
  r.noSession = (await rawPost(list)).status;
  r.unknownSession = (await rawPost(list, { "Mcp-Session-Id": "nope" })).status;
  r.badVersion = (await rawPost(list, { ...sid, "MCP-Protocol-Version": "1999-01-01" })).status;
  r.badOrigin = (await rawPost(list, { ...sid, Origin: "http://evil.example" })).status;
  r.badHost = await new Promise((resolve) => {
    // fetch sets Host itself: a raw request names a rebinding host
    import("node:http").then(({ request }) => {
      const u = new URL(url);
      const q = request({ host: u.hostname, port: u.port, path: u.pathname, method: "POST",
        headers: { ...sid, Host: "evil.example:" + u.port, "Content-Type": "application/json",
                   Accept: "application/json, text/event-stream" } }, (res) => { res.resume(); resolve(res.statusCode); });
      q.on("error", (e) => resolve(String(e)));
      q.end(JSON.stringify(list));
    });
  });
  r.goodOrigin = (await rawPost(list, { ...sid, Origin: "http://localhost:1234" })).status;
  r.notJson = (await fetch(url, { method: "POST", headers: { ...sid, "Content-Type": "text/plain", Accept: "application/json, text/event-stream" }, body: "x" })).status;
  r.parseError = (await fetch(url, { method: "POST", headers: { ...sid, "Content-Type": "application/json", Accept: "application/json, text/event-stream" }, body: "{nope" })).status;
  r.noAccept = (await rawPost(list, { ...sid, Accept: "text/html" })).status;
  r.put = (await fetch(url, { method: "PUT", headers: sid })).status;
  r.getNoAccept = (await fetch(url, { method: "GET", headers: { ...sid, Accept: "application/json" } })).status;
  r.secondGet = (await fetch(url, { method: "GET", headers: { ...sid, Accept: "text/event-stream" } })).status;
  r.otherPath = (await fetch(url.replace(/\/mcp$/, "/other"), { method: "POST" })).status;
  const js = await rawPost(list, { ...sid, Accept: "application/json" });
  r.jsonOnly = { status: js.status, ctype: js.ctype, tools: JSON.parse(js.body).result.tools.length };
  const batch = await rawPost([{ jsonrpc: "2.0", id: 11, method: "ping" }, { jsonrpc: "2.0", id: 12, method: "tools/list" }],
    { ...sid, Accept: "application/json" });
  r.batch = JSON.parse(batch.body).map((m) => m.id);
  const dup = await rawPost([{ jsonrpc: "2.0", id: 31, method: "ping" }, { jsonrpc: "2.0", id: 31, method: "ping" }],
    { ...sid, Accept: "application/json" });
  r.duplicateId = { status: dup.status, code: JSON.parse(dup.body).error.code };
  r.notification = (await rawPost({ jsonrpc: "2.0", method: "notifications/progress", params: { progressToken: 1, progress: 1 } }, sid)).status;
  out.refusals = r;

  // a client that goes away while its request is unanswered: the server
  // session is told (notifications/cancelled), and the next call works
  const ac = new AbortController();
  const hang = fetch(url, { method: "POST", signal: ac.signal,
    headers: { ...sid, "Content-Type": "application/json", Accept: "application/json, text/event-stream" },
    body: JSON.stringify({ jsonrpc: "2.0", id: 21, method: "tools/call", params: { name: "hang", arguments: {} } }) });
  const hr = await hang;
  out.hang = { status: hr.status, ctype: hr.headers.get("content-type") };
  await sleep(200);
  ac.abort();
  await hr.text().catch(() => {});
  await sleep(300);
  out.hang.after = textOf(await a.c.callTool({ name: "echo", arguments: { text: "after the hang" } }));

  // progress: the SDK's onprogress sees it; and on a raw POST while a GET
  // stream is open, the token routes it onto the POST's own SSE stream
  const prog = [];
  out.progress = { text: textOf(await a.c.callTool({ name: "progress", arguments: {} }, undefined,
    { onprogress: (p) => prog.push(p.progress) })) };
  out.progress.seen = prog;
  {
    const g = new AbortController();
    const h = { "Content-Type": "application/json", Accept: "application/json, text/event-stream",
                "MCP-Protocol-Version": out.a.version };
    const init = await fetch(url, { method: "POST", headers: h, body: JSON.stringify({ jsonrpc: "2.0", id: 1,
      method: "initialize", params: { protocolVersion: out.a.version, capabilities: {}, clientInfo: { name: "raw", version: "1" } } }) });
    const rsid = init.headers.get("mcp-session-id");
    await init.text();
    h["Mcp-Session-Id"] = rsid;
    await (await fetch(url, { method: "POST", headers: h, body: JSON.stringify({ jsonrpc: "2.0", method: "notifications/initialized" }) })).text();
    const get = await fetch(url, { method: "GET", signal: g.signal, headers: { ...h, Accept: "text/event-stream" } });
    out.progress.get = get.status;
    const post = await fetch(url, { method: "POST", headers: h, body: JSON.stringify({ jsonrpc: "2.0", id: 2,
      method: "tools/call", params: { name: "progress", arguments: {}, _meta: { progressToken: "tok-1" } } }) });
    const body = await post.text();
    out.progress.onPost = (body.match(/notifications\/progress/g) || []).length;
    out.progress.resultOnPost = body.includes("progressed");
    g.abort();
    await fetch(url, { method: "DELETE", headers: h });
  }

  await a.t.terminateSession();
  await c.t.terminateSession();
  await a.c.close();
  await b.c.close();
  await c.c.close();
  out.ok = true;
} catch (e) {
  out.error = String(e && e.stack || e);
}
console.log(JSON.stringify(out));
