// A small MCP server for the specs, with fault modes. No dependencies.
//
//   node mcp_testserver.js                 stdio (newline-delimited JSON-RPC)
//   node mcp_testserver.js --http          Streamable HTTP on 127.0.0.1, prints "PORT <n>"
//
// Tools (annotations as MCP servers publish them):
//   echo {text}            readOnlyHint   -> text "echo: <text>"
//   add {a, b}             readOnlyHint   -> structuredContent {sum}
//   slow {ms, tag}         readOnlyHint   -> answers after ms unless cancelled first
//   write {path, text}     destructiveHint-> appends to an in-memory journal
//   fail {}                (none)         -> isError result
//   crash {}               (none)         -> writes to stderr, exits with status 3
//   garbage {}             (none)         -> a non-JSON line, then the answer
//   unknown_id {}          (none)         -> a response with an unknown id, then the answer
//   big {bytes}            (none)         -> an answer of about `bytes` bytes
//   ask {method}           (none)         -> sends a server-to-client request, answers with the client's reply
//   progress {n}           readOnlyHint   -> n progress notifications, then the answer
//   drop_stream {}         (HTTP only)    -> SSE priming event (id, retry 100), stream closed; answer on GET
//   log {}                 readOnlyHint   -> structuredContent {calls, cancelled, journal, deletes, gets}
// Extra tools tool_01..tool_07 make tools/list take three pages (page size 5).
'use strict';
const http = require('http');

const log = { calls: {}, cancelled: [], journal: [], deletes: 0, gets: [], initialized: 0 };
const slow = new Map();   // request id -> { timer, finish }
const asks = new Map();   // our request id -> resolve
let askId = 0;

const TOOLS = [
  { name: 'echo', description: 'Echo text back', inputSchema: { type: 'object', properties: { text: { type: 'string' } } },
    annotations: { readOnlyHint: true, openWorldHint: false } },
  { name: 'add', description: 'Add two numbers', inputSchema: { type: 'object', properties: { a: { type: 'number' }, b: { type: 'number' } }, required: ['a', 'b'] },
    outputSchema: { type: 'object', properties: { sum: { type: 'number' } } }, annotations: { readOnlyHint: true } },
  { name: 'slow', description: 'Answer after ms', inputSchema: { type: 'object' }, annotations: { readOnlyHint: true, idempotentHint: true } },
  { name: 'write', description: 'Append to the journal', inputSchema: { type: 'object' }, annotations: { readOnlyHint: false, destructiveHint: true } },
  { name: 'fail', description: 'A tool error', inputSchema: { type: 'object' } },
  { name: 'crash', description: 'Exit mid-call', inputSchema: { type: 'object' } },
  { name: 'garbage', description: 'A garbage line first', inputSchema: { type: 'object' } },
  { name: 'unknown_id', description: 'A stray response first', inputSchema: { type: 'object' } },
  { name: 'big', description: 'A large answer', inputSchema: { type: 'object' } },
  { name: 'ask', description: 'Ask the client something', inputSchema: { type: 'object' } },
  { name: 'progress', description: 'Report progress', inputSchema: { type: 'object' }, annotations: { readOnlyHint: true } },
  { name: 'drop_stream', description: 'Close the SSE stream before answering', inputSchema: { type: 'object' } },
  { name: 'log', description: 'What the server saw', inputSchema: { type: 'object' }, annotations: { readOnlyHint: true } },
];
for (let i = 1; i <= 7; i++) TOOLS.push({ name: 'tool_0' + i, description: 'filler', inputSchema: { type: 'object' } });
const PAGE = 5;

function text(t) { return { content: [{ type: 'text', text: t }] }; }

// Handle one request; out.send(msg) writes a message to the client on the
// channel of this request, out.raw(line) writes raw bytes (stdio only).
function handle(msg, out) {
  const { id, method } = msg;
  const params = msg.params || {};
  const reply = (result) => out.send({ jsonrpc: '2.0', id, result });
  const fail = (code, message) => out.send({ jsonrpc: '2.0', id, error: { code, message } });
  if (method === 'initialize') {
    const v = ['2025-06-18', '2025-11-25'].includes(params.protocolVersion) ? params.protocolVersion : '2025-11-25';
    return reply({ protocolVersion: v, capabilities: { tools: { listChanged: false } },
                   serverInfo: { name: 'specula-mcp-testserver', version: '1.0.0' } });
  }
  if (method === 'ping') return reply({});
  if (method === 'tools/list') {
    const start = params.cursor ? parseInt(params.cursor, 10) : 0;
    const page = TOOLS.slice(start, start + PAGE);
    const r = { tools: page };
    if (start + PAGE < TOOLS.length) r.nextCursor = String(start + PAGE);
    return reply(r);
  }
  if (method !== 'tools/call') return fail(-32601, 'Method not found: ' + method);
  const name = params.name, a = params.arguments || {};
  log.calls[name] = (log.calls[name] || 0) + 1;
  switch (name) {
    case 'echo': return reply(text('echo: ' + a.text));
    case 'add': return reply({ content: [{ type: 'text', text: String(a.a + a.b) }], structuredContent: { sum: a.a + a.b } });
    case 'slow': {
      const timer = setTimeout(() => { slow.delete(id); reply(text('slow done: ' + (a.tag || ''))); }, a.ms || 1000);
      slow.set(id, { timer });
      return;
    }
    case 'write': log.journal.push(a.path + ':' + a.text); return reply(text('wrote ' + a.path));
    case 'fail': return reply({ content: [{ type: 'text', text: 'no such thing' }], isError: true });
    case 'crash':
      process.stderr.write('testserver: about to crash\nboom: crashing on purpose\n');
      setTimeout(() => process.exit(3), 20);
      return;
    case 'garbage': out.raw('this is not json {\n'); return reply(text('after garbage'));
    case 'unknown_id': out.send({ jsonrpc: '2.0', id: 987654, result: {} }); return reply(text('after stray'));
    case 'big': return reply(text('x'.repeat(a.bytes || 1000)));
    case 'ask': {
      const rid = 'srv-' + (++askId);
      asks.set(rid, (resp) => reply(text(JSON.stringify(resp.error || resp.result))));
      return out.send({ jsonrpc: '2.0', id: rid, method: a.method || 'sampling/createMessage', params: {} });
    }
    case 'progress': {
      const tok = params._meta && params._meta.progressToken;
      const n = a.n || 3;
      for (let i = 1; i <= n; i++) if (tok !== undefined) out.send({ jsonrpc: '2.0', method: 'notifications/progress', params: { progressToken: tok, progress: i, total: n } });
      return reply(text('progress done'));
    }
    case 'drop_stream': if (out.drop) return out.drop(() => reply(text('resumed'))); return reply(text('no stream'));
    case 'log': return reply({ content: [{ type: 'text', text: JSON.stringify(log) }], structuredContent: log });
    default: return fail(-32602, 'Unknown tool: ' + name);
  }
}

function notification(msg) {
  if (msg.method === 'notifications/initialized') log.initialized++;
  if (msg.method === 'notifications/cancelled') {
    const rid = msg.params && msg.params.requestId;
    log.cancelled.push(rid);
    const s = slow.get(rid);
    if (s) { clearTimeout(s.timer); slow.delete(rid); }
  }
}

function dispatch(msg, out) {
  if (msg.method === undefined && msg.id !== undefined) {   // the client's answer to our request
    const k = asks.get(msg.id);
    if (k) { asks.delete(msg.id); k(msg); }
    return 'response';
  }
  if (msg.id === undefined) { notification(msg); return 'notification'; }
  handle(msg, out);
  return 'request';
}

if (!process.argv.includes('--http')) {
  const send = (m) => process.stdout.write(JSON.stringify(m) + '\n');
  const out = { send, raw: (s) => process.stdout.write(s) };
  let buf = '';
  process.stdin.setEncoding('utf8');
  process.stdin.on('data', (d) => {
    buf += d;
    let i;
    while ((i = buf.indexOf('\n')) >= 0) {
      const line = buf.slice(0, i); buf = buf.slice(i + 1);
      if (!line.trim()) continue;
      let msg;
      try { msg = JSON.parse(line); } catch (e) { process.stderr.write('testserver: bad line\n'); continue; }
      dispatch(msg, out);
    }
  });
  process.stdin.on('end', () => process.exit(0));
  process.stderr.write('testserver: ready on stdio\n');
} else {
  const SID = 'sess-' + process.pid;
  let eventId = 0;
  let parked = null;     // answer waiting for a GET after drop_stream
  const server = http.createServer((req, res) => {
    if (req.method === 'DELETE') { log.deletes++; res.writeHead(200); return res.end(); }
    if (req.method === 'GET') {
      log.gets.push(req.headers['last-event-id'] || '');
      res.writeHead(200, { 'Content-Type': 'text/event-stream', 'Mcp-Session-Id': SID });
      if (parked) { const p = parked; parked = null; p(res); }
      return;
    }
    let body = '';
    req.on('data', (d) => { body += d; });
    req.on('end', () => {
      let msg;
      try { msg = JSON.parse(body); } catch (e) { res.writeHead(400); return res.end('bad json'); }
      if (msg.method !== 'initialize' && req.headers['mcp-session-id'] !== SID) {
        res.writeHead(400, { 'Content-Type': 'application/json' });
        return res.end(JSON.stringify({ jsonrpc: '2.0', id: null, error: { code: -32000, message: 'missing session' } }));
      }
      if (msg.id === undefined || msg.method === undefined) {
        dispatch(msg, null);
        res.writeHead(202); return res.end();
      }
      const sse = msg.method === 'tools/call';
      if (!sse) {
        return handle(msg, { send: (m) => {
          res.writeHead(200, { 'Content-Type': 'application/json', 'Mcp-Session-Id': SID });
          res.end(JSON.stringify(m));
        }, raw: () => {} });
      }
      res.writeHead(200, { 'Content-Type': 'text/event-stream', 'Mcp-Session-Id': SID });
      const write = (r, m) => { r.write('id: e' + (++eventId) + '\ndata: ' + JSON.stringify(m) + '\n\n'); };
      let target = res;
      const out = {
        send: (m) => { write(target, m); if (m.id === msg.id && (m.result || m.error)) target.end(); },
        raw: (s) => target.write('data: ' + s + '\n'),
        drop: (answer) => {
          res.write('id: e' + (++eventId) + '\nretry: 100\ndata: \n\n');
          setTimeout(() => res.end(), 20);
          parked = (getres) => { target = getres; answer(); };
        },
      };
      dispatch(msg, out);
    });
  });
  server.listen(0, '127.0.0.1', () => {
    process.stdout.write('PORT ' + server.address().port + '\n');
  });
  process.on('SIGTERM', () => process.exit(0));
}
