// A small MCP server for the specs, with fault modes. No dependencies.
//
//   node mcp_testserver.js                 stdio (newline-delimited JSON-RPC)
//   node mcp_testserver.js --http          Streamable HTTP on 127.0.0.1, prints "PORT <n>"
//
// Protocol eras: a session (initialize, then Mcp-Session-Id over HTTP) for
// 2025-06-18 and 2025-11-25; with --modern also stateless 2026-07-28
// (server/discover;
// each request names its version in _meta and, over HTTP, in the
// MCP-Protocol-Version header, with Mcp-Method and Mcp-Name beside it: a
// mismatch is refused with -32020). At 2026-07-28 results carry resultType
// (lists: ttlMs and cacheScope), `ask` answers InputRequiredResult (the
// client retries with inputResponses and the requestState unchanged), and
// two more tools are listed: routed {region, tier, note} (region and tier
// are x-mcp-header parameters; it answers with the Mcp-Param headers it got)
// and bad_header (an invalid x-mcp-header: a client must leave it out).
//   --modern                   serve 2026-07-28 too (without it server/discover is -32601:
//                              a session-only server, as servers before 2026-07-28 are)
//   --ttl-ms N                 ttlMs of list results at 2026-07-28 (default 0: no caching)
//   --mute-discover            server/discover is never answered (a server that ignores
//                              what it does not know)
//
// HTTP options:
//   --no-get                   GET /mcp answers 405 (no server stream)
//   --oauth                    /mcp needs a Bearer token; the same server is the
//                              authorization server (RFC 9728 and RFC 8414 metadata,
//                              /authorize, /token, /register), checking PKCE S256,
//                              the resource indicator, redirect URIs and client auth
//   --token-ttl S              access token lifetime (expires_in), default 3600
//   --scopes "a b"             scopes_supported of the resource
//   --challenge-scope "a"      scope="a" in the 401's WWW-Authenticate
//   --auth-methods m1,m2       token_endpoint_auth_methods_supported (default none,
//                              client_secret_basic, client_secret_post, private_key_jwt)
//   --client id:secret         a pre-registered confidential client (also client_credentials)
//   --jwt-client id:pubkey.pem a pre-registered client authenticating with private_key_jwt
//                              (repeatable)
//   --no-dcr                   no registration_endpoint
//   --no-pkce                  no code_challenge_methods_supported in the metadata
//   --prm-resource URL         the resource its metadata names (default: this /mcp)
//   --deny                     /authorize redirects with error=access_denied
//   --login                    /authorize sends the browser to a login page first
//                              (/login?next=...; with user=ada it goes on)
//   --garbage-token            the token endpoint answers 200 with broken JSON
//   --reject-tokens            /mcp refuses every token it issued (a broken server)
//   --leaky                    error descriptions echo the credential they reject
//                              (a careless server: the client must scrub them)
//   --token-log FILE           appends every credential issued or seen as a JSON line
//                              {kind, value} (for the specs that look for leaks)
//   --iss correct|wrong|slash|omit   the redirect's iss (RFC 9207): the issuer, another
//                              one, the issuer with a "/" added, none; the metadata
//                              advertises iss unless --iss-unadvertised
//   --metadata-issuer URL      the issuer the metadata states (default: its own)
//   --as-scopes "a b"          scopes_supported of the authorization server (default --scopes)
//   --dpop                     DPoP-bound tokens (RFC 9449): proofs checked at /token and
//                              /mcp (signature, htm, htu, iat, fresh jti, ath, key binding)
//   --dpop-nonce               and both ask for their nonce first (use_dpop_nonce)
//   --assertion VALUE          the jwt-bearer grant accepts this workload assertion
//   --idp-id-token VALUE       POST /idp/token exchanges this ID token (RFC 8693) for an
//                              ID-JAG that the jwt-bearer grant accepts
//   POST /admin/move-as        the resource moves to the authorization server <base>/as2:
//                              new metadata, new client registry, every token revoked
//
// Tools (annotations as MCP servers publish them):
//   echo {text}            readOnlyHint   -> text "echo: <text>"
//   add {a, b}             readOnlyHint   -> structuredContent {sum}
//   slow {ms, tag}         readOnlyHint   -> answers after ms unless cancelled first
//   write {path, text}     destructiveHint-> appends to an in-memory journal
//   fail {}                (none)         -> isError result
//   crash {orphan_s, cut}  (none)         -> writes to stderr, exits with status 3; with cut = 'whole' or
//                                            'half', its answer (or its first 20 bytes) on stdout with no
//                                            newline first; with orphan_s, first
//                                            starts `sleep orphan_s` holding its stdout and stderr (a child
//                                            that outlives it; its pid is on stderr as "orphan pid N" and,
//                                            with pidfile, in that file)
//   garbage {}             (none)         -> a non-JSON line, then the answer
//   unknown_id {}          (none)         -> a response with an unknown id, then the answer
//   big {bytes}            (none)         -> an answer of about `bytes` bytes
//   ask {method, params, via} (none)      -> sends a server-to-client request (on the
//                                           call's stream, or via = "get": on the GET
//                                           stream), answers with the client's reply
//   progress {n}           readOnlyHint   -> n progress notifications, then the answer
//   drop_stream {}         (HTTP only)    -> SSE priming event (id, retry 100), stream closed; answer on GET
//   admin {}               (none)         -> with --oauth: needs scope mcp:admin (403 insufficient_scope)
//   revoke {}              (none)         -> with --oauth: the access token of this call stops working
//   log {}                 readOnlyHint   -> structuredContent {calls, cancelled, journal, deletes, gets, reads, auth}
//   env {name, as}         readOnlyHint   -> text: the value of the server's environment variable `name`,
//                                            as = text (as it is), json ({"token": value} as JSON.stringify
//                                            writes it), jsona (the same with every non-ASCII character
//                                            as \uXXXX, as Python writes it), pct, b64, hex or html (&#N;)
//   crash_env {name}       (none)         -> prints the variable on stderr as it dies (status 3)
// Extra tools tool_01..tool_07 make tools/list take five pages (page size 5).
// Resources: three notes (text, text, blob), two per page; the template
// note:///{name} reads any note (note:///slow-<ms>-... answers after ms);
// note:///missing... is error -32002.
// POST /v1/chat/completions (HTTP): an OpenAI-compatible model that answers
// "model says: <last user message>" (for sampling hooks that call an LLM).
'use strict';
const http = require('http');
const crypto = require('crypto');
const fs = require('fs');

const argv = process.argv.slice(2);
const flag = (n) => argv.includes(n);
const opt = (n, d) => { const i = argv.indexOf(n); return i >= 0 && i + 1 < argv.length ? argv[i + 1] : d; };

const MODERN = '2026-07-28';
const LEGACY = !flag('--modern');
const TTL_MS = parseInt(opt('--ttl-ms', '0'), 10);
const LISTS = ['tools/list', 'resources/list', 'resources/templates/list', 'prompts/list'];
// every keyword a client must keep as it is (a $ref is never fetched)
const SCHEMA_2020 = {
  $schema: 'https://json-schema.org/draft/2020-12/schema', type: 'object', additionalProperties: false,
  $defs: { addr: { $anchor: 'addr', type: 'object', properties: {}, required: [] },
           remote: { $ref: 'https://example.test/never-fetched.json' } },
  properties: { home: { $ref: '#/$defs/addr' }, kind: { anyOf: [{ const: 'a' }, { const: 'b' }] }, tags: { type: 'array', items: [] } },
  allOf: [{ anyOf: [{ required: ['home'] }, { required: ['kind'] }] }],
  if: { properties: { kind: { const: 'a' } } }, then: { required: ['home'] }, else: {},
};
const same = (a, b) => JSON.stringify(a, Object.keys(flat(a)).sort()) === JSON.stringify(b, Object.keys(flat(b)).sort());
function flat(v, out = {}) {
  if (v && typeof v === 'object') for (const k of Object.keys(v)) { out[k] = true; flat(v[k], out); }
  return out;
}
const MODERN_TOOLS = [
  { name: 'routed', description: 'Answers with the Mcp-Param headers it got',
    inputSchema: { type: 'object', properties: { region: { type: 'string', 'x-mcp-header': 'Region' },
      tier: { type: 'integer', 'x-mcp-header': 'Tier' }, note: { type: 'string' } }, required: ['region'] },
    annotations: { readOnlyHint: true } },
  { name: 'bad_header', description: 'x-mcp-header on a number: invalid',
    inputSchema: { type: 'object', properties: { score: { type: 'number', 'x-mcp-header': 'Score' } } } },
  { name: 'schema_2020', description: 'A JSON Schema 2020-12 inputSchema', inputSchema: SCHEMA_2020 },
  { name: 'schema_echo', description: 'Says whether {schema} is schema_2020\'s inputSchema, unchanged',
    inputSchema: { type: 'object', properties: { schema: { type: 'object' } }, required: ['schema'] } },
];
const log = { calls: {}, cancelled: [], journal: [], deletes: 0, gets: [], initialized: 0, reads: {},
              discovered: 0, modern: 0, sessions: 0, lists: {}, client_info: null, rounds: [], mcp_headers: [],
              answers: [], auth: { authorize: 0, token: {}, registrations: 0, rejected: 0, forbidden: 0,
                                   pkce_ok: 0, resource_ok: 0, methods: {}, scopes: [], unauthenticated: 0 } };
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
  { name: 'admin', description: 'Needs scope mcp:admin', inputSchema: { type: 'object' } },
  { name: 'revoke', description: 'Revoke the token of this call', inputSchema: { type: 'object' } },
  { name: 'log', description: 'What the server saw', inputSchema: { type: 'object' }, annotations: { readOnlyHint: true } },
  { name: 'env', description: 'A variable of the environment, encoded', inputSchema: { type: 'object' }, annotations: { readOnlyHint: true } },
  { name: 'crash_env', description: 'Print a variable on stderr and die', inputSchema: { type: 'object' } },
];
for (let i = 1; i <= 7; i++) TOOLS.push({ name: 'tool_0' + i, description: 'filler', inputSchema: { type: 'object' } });
const PAGE = 5;

const NOTES = {
  'note:///alpha': { name: 'alpha', mimeType: 'text/plain', text: 'alpha says hello' },
  'note:///beta': { name: 'beta', mimeType: 'text/markdown', text: '# beta\nsecond note' },
  'note:///gamma.bin': { name: 'gamma', mimeType: 'application/octet-stream', blob: Buffer.from([0, 1, 2, 250]).toString('base64') },
};
const RPAGE = 2;

function text(t) { return { content: [{ type: 'text', text: t }] }; }

// A value in one of the forms a server may write it (see the env tool).
function encoded(v, as) {
  switch (as || 'text') {
    case 'text': return v;
    case 'json': return JSON.stringify({ token: v });
    case 'jsona': return JSON.stringify({ token: v }).replace(/[\u0080-\uffff]/g,
      (c) => '\\u' + c.charCodeAt(0).toString(16).padStart(4, '0'));
    case 'pct': return encodeURIComponent(v);
    case 'b64': return Buffer.from(v, 'utf8').toString('base64');
    case 'hex': return Buffer.from(v, 'utf8').toString('hex');
    case 'html': return Array.from(v).map((c) => '&#' + c.codePointAt(0) + ';').join('');
    default: return 'unknown encoding ' + as;
  }
}

// Handle one request; out.send(msg) writes a message to the client on the
// channel of this request, out.raw(line) writes raw bytes (stdio only),
// out.ask(msg) sends a request on the GET stream (HTTP only), out.auth is
// the token that came with it (HTTP with --oauth).
function handle(msg, out) {
  const { id, method } = msg;
  const params = msg.params || {};
  const meta = params._meta || {};
  const version = LEGACY ? undefined : meta['io.modelcontextprotocol/protocolVersion'];
  const modern = version === MODERN;
  const fail = (code, message, data) => out.send({ jsonrpc: '2.0', id, error: Object.assign({ code, message }, data ? { data } : {}) });
  const reply = (result) => out.send({ jsonrpc: '2.0', id, result: modern ? Object.assign({ resultType: 'complete' },
    LISTS.includes(method) ? { ttlMs: TTL_MS, cacheScope: 'private' } : {}, result) : result });
  if (version !== undefined && !modern) return fail(-32022, 'Unsupported protocol version', { supported: [MODERN], requested: String(version) });
  if (modern) {
    log.modern++;
    log.client_info = meta['io.modelcontextprotocol/clientInfo'] || null;
    log.client_capabilities = meta['io.modelcontextprotocol/clientCapabilities'] || {};
  }
  if (LISTS.includes(method)) log.lists[method] = (log.lists[method] || 0) + 1;
  if (method === 'server/discover') {
    if (flag('--mute-discover')) return;
    if (LEGACY) return fail(-32601, 'Method not found: ' + method);
    log.discovered++;
    return reply({ supportedVersions: [MODERN], capabilities: { tools: { listChanged: false }, resources: { listChanged: false } },
                   serverInfo: { name: 'specula-mcp-testserver', version: '1.0.0' } });
  }
  if (method === 'initialize') {
    log.sessions++;
    const v = ['2025-06-18', '2025-11-25'].includes(params.protocolVersion) ? params.protocolVersion : '2025-11-25';
    log.client_capabilities = params.capabilities || {};
    return reply({ protocolVersion: v, capabilities: { tools: { listChanged: false }, resources: { listChanged: false } },
                   serverInfo: { name: 'specula-mcp-testserver', version: '1.0.0' } });
  }
  if (method === 'ping') return reply({});
  if (method === 'tools/list') {
    const all = modern ? TOOLS.concat(MODERN_TOOLS) : TOOLS;
    const start = params.cursor ? parseInt(params.cursor, 10) : 0;
    const page = all.slice(start, start + PAGE);
    const r = { tools: page };
    if (start + PAGE < all.length) r.nextCursor = String(start + PAGE);
    return reply(r);
  }
  if (method === 'resources/list') {
    const all = Object.keys(NOTES).map((uri) => ({ uri, name: NOTES[uri].name, mimeType: NOTES[uri].mimeType }));
    const start = params.cursor ? parseInt(params.cursor, 10) : 0;
    const r = { resources: all.slice(start, start + RPAGE) };
    if (start + RPAGE < all.length) r.nextCursor = String(start + RPAGE);
    return reply(r);
  }
  if (method === 'resources/templates/list') {
    return reply({ resourceTemplates: [{ uriTemplate: 'note:///{name}', name: 'note', description: 'A note by name', mimeType: 'text/plain' }] });
  }
  if (method === 'resources/read') {
    const uri = params.uri;
    log.reads[uri] = (log.reads[uri] || 0) + 1;
    const n = NOTES[uri];
    if (n) return reply({ contents: [Object.assign({ uri, mimeType: n.mimeType }, n.blob ? { blob: n.blob } : { text: n.text })] });
    const m = /^note:\/\/\/(.+)$/.exec(uri || '');
    if (m && !m[1].startsWith('missing')) {
      const r = { contents: [{ uri, mimeType: 'text/plain', text: 'note ' + decodeURIComponent(m[1]) }] };
      const d = /^slow-(\d+)-/.exec(m[1]);
      if (d) { setTimeout(() => reply(r), parseInt(d[1], 10)); return; }
      return reply(r);
    }
    return fail(-32002, 'Resource not found: ' + uri);
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
      if (a.orphan_s) {
        const child = require('child_process').spawn('sleep', [String(a.orphan_s)],
          { stdio: ['ignore', 'inherit', 'inherit'], detached: true });
        child.unref();
        process.stderr.write('orphan pid ' + child.pid + '\n');
        if (a.pidfile) require('fs').writeFileSync(a.pidfile, String(child.pid));
      }
      // cut: its answer with no newline ('whole') or its first 20 bytes ('half') on stdout first
      if (a.cut) {
        const line = JSON.stringify({ jsonrpc: '2.0', id, result: text('cut answer') });
        out.raw(a.cut === 'whole' ? line : line.slice(0, 20));
      }
      process.stderr.write('testserver: about to crash\nboom: crashing on purpose\n');
      setTimeout(() => process.exit(3), 20);
      return;
    case 'garbage': out.raw('this is not json {\n'); return reply(text('after garbage'));
    case 'unknown_id': out.send({ jsonrpc: '2.0', id: 987654, result: {} }); return reply(text('after stray'));
    case 'big': return reply(text('x'.repeat(a.bytes || 1000)));
    case 'schema_echo': {
      const ok = same(a.schema, SCHEMA_2020) && Array.isArray(a.schema.properties.tags.items)
        && !Array.isArray(a.schema.$defs.addr.properties);
      return reply(text(ok ? 'same' : 'differs: ' + JSON.stringify(a.schema)));
    }
    case 'routed': {
      const h = out.headers || {};
      const got = {};
      for (const k of Object.keys(h)) if (k.startsWith('mcp-param-')) got[k] = h[k];
      return reply({ content: [{ type: 'text', text: JSON.stringify(got) }], structuredContent: { headers: got } });
    }
    case 'ask': {
      if (modern) {
        // 2026-07-28: no request of the server's own; the input it needs
        // comes back in a retry of this call
        const state = a.no_state ? undefined : 'state-' + (++askId) + '-' + crypto.randomBytes(4).toString('hex');
        if (!params.inputResponses) {
          if (state) asks.set(state, { first_id: id });
          const r = { resultType: 'input_required',
                      inputRequests: { q: { method: a.method || 'sampling/createMessage', params: a.params || {} } } };
          if (state) r.requestState = state;
          return out.send({ jsonrpc: '2.0', id, result: r });
        }
        const echoed = params.requestState;
        const state_ok = echoed === undefined ? 'absent' : (asks.has(echoed) ? 'echoed' : 'altered');
        const first = echoed !== undefined ? asks.get(echoed) : undefined;
        if (echoed !== undefined) asks.delete(echoed);
        log.rounds.push({ id, state: state_ok, same_id: first ? first.first_id === id : null });
        const resp = params.inputResponses.q;
        log.answers.push({ method: a.method, response: { result: resp } });
        return reply({ content: [{ type: 'text', text: JSON.stringify(resp) }], structuredContent: { result: resp, state: state_ok } });
      }
      const rid = 'srv-' + (++askId);
      asks.set(rid, (resp) => {
        log.answers.push({ method: a.method, response: resp.error ? { error: resp.error } : { result: resp.result } });
        reply({ content: [{ type: 'text', text: JSON.stringify(resp.error || resp.result) }],
                structuredContent: resp.error ? { error: resp.error } : { result: resp.result } });
      });
      const req = { jsonrpc: '2.0', id: rid, method: a.method || 'sampling/createMessage', params: a.params || {} };
      if (a.via === 'get') {
        if (!out.ask || !out.ask(req)) { asks.delete(rid); return reply({ content: [{ type: 'text', text: 'no GET stream' }], isError: true }); }
        return;
      }
      return out.send(req);
    }
    case 'progress': {
      const tok = params._meta && params._meta.progressToken;
      const n = a.n || 3;
      for (let i = 1; i <= n; i++) if (tok !== undefined) out.send({ jsonrpc: '2.0', method: 'notifications/progress', params: { progressToken: tok, progress: i, total: n } });
      return reply(text('progress done'));
    }
    case 'drop_stream': if (out.drop) return out.drop(() => reply(text('resumed'))); return reply(text('no stream'));
    case 'admin': return reply(text('admin done'));
    case 'revoke': if (out.revoke) out.revoke(); return reply(text('revoked'));
    case 'log': return reply({ content: [{ type: 'text', text: JSON.stringify(log) }], structuredContent: log });
    case 'env': return reply(text('value: ' + encoded(process.env[a.name] || '', a.as)));
    case 'crash_env':
      process.stderr.write('fatal: cannot reach the backend with token=' + (process.env[a.name] || '') + '\n');
      setTimeout(() => process.exit(3), 20);
      return;
    default: return fail(-32602, 'Unknown tool: ' + name);
  }
}

function notification(msg) {
  if (msg.method === 'notifications/initialized') log.initialized++;
  if (msg.method === 'notifications/roots/list_changed') log.roots_changed = (log.roots_changed || 0) + 1;
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

if (!flag('--http')) {
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
  // MCP_TS_STUBBORN=1: a server that outlives its client (ignores SIGTERM and
  // the end of its stdin); only SIGKILL ends it
  if (process.env.MCP_TS_STUBBORN === '1') {
    process.on('SIGTERM', () => {});
    setInterval(() => {}, 1 << 30);   // alive with nothing left to read
  }
  else process.stdin.on('end', () => process.exit(0));
  process.stderr.write('testserver: ready on stdio\n');
} else {
  const SID = 'sess-' + process.pid;
  let eventId = 0;
  let parked = null;     // answer waiting for a GET after drop_stream
  const listeners = [];  // open GET streams (no Last-Event-ID)
  let base = '';         // http://127.0.0.1:<port>

  // ---- OAuth: this server is its own authorization server -----------------------------
  const OAUTH = flag('--oauth');
  const TTL = parseInt(opt('--token-ttl', '3600'), 10);
  const SCOPES = opt('--scopes', null);
  const CHALLENGE_SCOPE = opt('--challenge-scope', null);
  const METHODS = opt('--auth-methods', 'none,client_secret_basic,client_secret_post,private_key_jwt').split(',');
  const LEAKY = flag('--leaky');
  const TOKEN_LOG = opt('--token-log', null);
  let clients = new Map();       // client_id -> { secret, method, redirect_uris, pubkey }
  const codes = new Map();       // code -> { client_id, challenge, redirect_uri, scope, resource }
  const access = new Map();      // token -> { scope, exp, client_id }
  const refresh = new Map();     // token -> { scope, client_id }
  const note = (kind, value) => { if (TOKEN_LOG && value) fs.appendFileSync(TOKEN_LOG, JSON.stringify({ kind, value }) + '\n'); };
  const rnd = (n) => crypto.randomBytes(n).toString('base64url');
  if (opt('--client', null)) {
    const [cid, sec] = opt('--client').split(':');
    clients.set(cid, { secret: sec, method: null, redirect_uris: null });
    note('client_secret', sec);
  }
  argv.forEach((a, k) => {
    if (a !== '--jwt-client' || k + 1 >= argv.length) return;
    const s = argv[k + 1]; const i = s.indexOf(':');
    clients.set(s.slice(0, i), { pubkey: fs.readFileSync(s.slice(i + 1), 'utf8'), method: 'private_key_jwt' });
  });
  const resource = () => opt('--prm-resource', base + '/mcp');
  // the authorization server: this server, or <base>/as2 after /admin/move-as
  let asPrefix = '';
  const asBase = () => base + asPrefix;
  const ISS = opt('--iss', null);
  const META_ISSUER = opt('--metadata-issuer', null);
  const DPOP_NONCE = flag('--dpop-nonce');
  const DPOP = flag('--dpop') || DPOP_NONCE;
  const JWT_BEARER = 'urn:ietf:params:oauth:grant-type:jwt-bearer';
  const jags = new Map();        // ID-JAG -> { audience, resource }
  const dpopJtis = new Set();
  log.auth.dpop = { proofs: 0, as_nonce: 0, rs_nonce: 0, bad: [] };
  const b64json = (x) => JSON.parse(Buffer.from(x, 'base64url').toString('utf8'));
  // A request's DPoP proof: { jkt } | { error } | { nonce: true } (it lacks ours).
  function dpop_check(req, htu, token, nonce) {
    const proof = req.headers.dpop;
    if (!proof || proof.includes(',')) return { error: 'no DPoP proof' };
    const [h64, c64, s64] = proof.split('.');
    let hdr, c;
    try { hdr = b64json(h64); c = b64json(c64); } catch (e) { return { error: 'the proof is not a JWT' }; }
    if (hdr.typ !== 'dpop+jwt' || hdr.alg !== 'ES256' || !hdr.jwk || hdr.jwk.d !== undefined) return { error: 'bad proof header' };
    let ok = false;
    try {
      const key = crypto.createPublicKey({ key: hdr.jwk, format: 'jwk' });
      ok = crypto.verify('sha256', Buffer.from(h64 + '.' + c64), { key, dsaEncoding: 'ieee-p1363' }, Buffer.from(s64 || '', 'base64url'));
    } catch (e) { ok = false; }
    if (!ok) return { error: 'the proof signature does not verify' };
    if (c.htm !== req.method || c.htu !== htu) return { error: 'htm/htu ' + c.htm + ' ' + c.htu };
    if (typeof c.iat !== 'number' || Math.abs(Date.now() / 1000 - c.iat) > 60) return { error: 'iat' };
    if (typeof c.jti !== 'string' || dpopJtis.has(c.jti)) return { error: 'jti missing or replayed' };
    dpopJtis.add(c.jti);
    if (token !== undefined && c.ath !== sha256(token)) return { error: 'ath' };
    if (nonce && c.nonce !== nonce) return { nonce: true };
    log.auth.dpop.proofs++;
    const j = hdr.jwk;
    return { jkt: crypto.createHash('sha256').update(JSON.stringify({ crv: j.crv, kty: j.kty, x: j.x, y: j.y })).digest('base64url') };
  }
  const prmUrl = () => base + '/.well-known/oauth-protected-resource/mcp';
  const json = (res, status, obj, headers) => {
    res.writeHead(status, Object.assign({ 'Content-Type': 'application/json' }, headers || {}));
    res.end(JSON.stringify(obj));
  };
  const oerr = (res, status, error, desc) => json(res, status, { error, error_description: desc });
  const sha256 = (s) => crypto.createHash('sha256').update(s).digest('base64url');
  const form = (body) => Object.fromEntries(new URLSearchParams(body));

  function issue(client_id, scope, jkt) {
    const t = { access_token: rnd(24), token_type: jkt ? 'DPoP' : 'Bearer', expires_in: TTL, refresh_token: rnd(24) };
    if (scope) t.scope = scope;
    access.set(t.access_token, { scope: scope || '', exp: Date.now() + TTL * 1000, client_id, jkt });
    refresh.set(t.refresh_token, { scope, client_id, jkt });
    note('access', t.access_token); note('refresh', t.refresh_token);
    return t;
  }

  // The client's authentication at the token endpoint: client_id | null (res answered).
  function client_auth(req, p, res) {
    const h = req.headers.authorization || '';
    let cid, method;
    if (h.startsWith('Basic ')) {
      const dec = Buffer.from(h.slice(6), 'base64').toString('utf8');
      const i = dec.indexOf(':');
      cid = decodeURIComponent(dec.slice(0, i)); const sec = decodeURIComponent(dec.slice(i + 1));
      method = 'client_secret_basic';
      const c = clients.get(cid);
      if (!c || c.secret !== sec) { oerr(res, 401, 'invalid_client', LEAKY ? 'bad secret ' + sec : 'bad client secret'); return null; }
    } else if (p.client_assertion) {
      method = 'private_key_jwt';
      if (p.client_assertion_type !== 'urn:ietf:params:oauth:client-assertion-type:jwt-bearer') { oerr(res, 400, 'invalid_client', 'bad assertion type'); return null; }
      const [h64, c64, s64] = p.client_assertion.split('.');
      let hdr, claims;
      try { hdr = JSON.parse(Buffer.from(h64, 'base64url')); claims = JSON.parse(Buffer.from(c64, 'base64url')); } catch (e) { oerr(res, 400, 'invalid_client', 'assertion is not a JWT'); return null; }
      cid = claims.iss;
      const c = clients.get(cid);
      const key = hdr.alg === 'ES256' ? (c && c.pubkey && { key: c.pubkey, dsaEncoding: 'ieee-p1363' })
        : (hdr.alg === 'RS256' ? c && c.pubkey : null);
      let ok = false;
      try { ok = !!key && crypto.verify('sha256', Buffer.from(h64 + '.' + c64), key, Buffer.from(s64 || '', 'base64url')); } catch (e) { ok = false; }
      const now = Math.floor(Date.now() / 1000);
      if (!ok || claims.sub !== cid || claims.aud !== asBase() || !(claims.exp > now)) {
        oerr(res, 401, 'invalid_client', LEAKY ? 'bad assertion ' + p.client_assertion : 'bad assertion'); return null;
      }
      log.auth.jwt_alg = hdr.alg;
    } else if (p.client_secret) {
      cid = p.client_id; method = 'client_secret_post';
      const c = clients.get(cid);
      if (!c || c.secret !== p.client_secret) { oerr(res, 401, 'invalid_client', LEAKY ? 'bad secret ' + p.client_secret : 'bad client secret'); return null; }
    } else {
      cid = p.client_id; method = 'none';
      const c = clients.get(cid);
      if (!c) { oerr(res, 401, 'invalid_client', 'unknown client'); return null; }
      if (c.secret && c.method !== 'none') { oerr(res, 401, 'invalid_client', 'this client must authenticate'); return null; }
    }
    const c = clients.get(cid);
    if (c.method && c.method !== method) { oerr(res, 401, 'invalid_client', 'registered for ' + c.method + ', used ' + method); return null; }
    if (!METHODS.includes(method)) { oerr(res, 401, 'invalid_client', method + ' not supported'); return null; }
    log.auth.methods[method] = (log.auth.methods[method] || 0) + 1;
    return cid;
  }

  function token_endpoint(req, body, res) {
    const p = form(body);
    const g = p.grant_type;
    log.auth.token[g] = (log.auth.token[g] || 0) + 1;
    for (const k of ['code', 'code_verifier', 'refresh_token', 'client_secret', 'client_assertion', 'assertion']) note('seen_' + k, p[k]);
    let jkt;
    if (DPOP) {
      const d = dpop_check(req, asBase() + '/token', undefined, DPOP_NONCE && 'as-nonce-1');
      if (d.error) { log.auth.dpop.bad.push(d.error); return oerr(res, 400, 'invalid_dpop_proof', d.error); }
      if (d.nonce) {
        log.auth.dpop.as_nonce++;
        return json(res, 400, { error: 'use_dpop_nonce', error_description: 'a nonce is needed' }, { 'DPoP-Nonce': 'as-nonce-1' });
      }
      jkt = d.jkt;
    }
    // a workload's jwt-bearer grant may come without any client authentication
    const anonymous = g === JWT_BEARER && !req.headers.authorization && !p.client_id && !p.client_assertion;
    const cid = anonymous ? '(workload)' : client_auth(req, p, res);
    if (!cid) return;
    if (flag('--garbage-token')) { res.writeHead(200, { 'Content-Type': 'application/json' }); return res.end('{"token_type":"Bearer"'); }
    if (p.resource !== undefined && p.resource !== resource()) return oerr(res, 400, 'invalid_target', 'unknown resource ' + p.resource);
    if (p.resource === resource()) log.auth.resource_ok++;
    if (g === 'authorization_code') {
      const c = codes.get(p.code);
      codes.delete(p.code);
      if (!c || c.client_id !== cid) return oerr(res, 400, 'invalid_grant', LEAKY ? 'unknown code ' + p.code : 'unknown code');
      if (c.redirect_uri !== p.redirect_uri) return oerr(res, 400, 'invalid_grant', 'redirect_uri differs');
      if (!p.code_verifier || sha256(p.code_verifier) !== c.challenge) return oerr(res, 400, 'invalid_grant', 'PKCE verification failed');
      if (c.resource !== p.resource) return oerr(res, 400, 'invalid_target', 'resource differs from the authorization request');
      log.auth.pkce_ok++;
      log.auth.scopes.push(c.scope || '');
      return json(res, 200, issue(cid, c.scope, jkt));
    }
    if (g === 'refresh_token') {
      const r = refresh.get(p.refresh_token);
      if (!r || r.client_id !== cid) return oerr(res, 400, 'invalid_grant', LEAKY ? 'unknown refresh token ' + p.refresh_token : 'unknown refresh token');
      if (r.jkt && r.jkt !== jkt) return oerr(res, 400, 'invalid_grant', 'the refresh token is bound to another DPoP key');
      refresh.delete(p.refresh_token);   // rotated
      return json(res, 200, issue(cid, r.scope, jkt));
    }
    if (g === 'client_credentials') {
      log.auth.scopes.push(p.scope || '');
      const t = issue(cid, p.scope);
      refresh.delete(t.refresh_token); delete t.refresh_token;
      return json(res, 200, t);
    }
    if (g === JWT_BEARER) {
      const jag = jags.get(p.assertion);
      const ok = (opt('--assertion', null) && p.assertion === opt('--assertion', null)) ||
        (jag && jag.audience === asBase() && jag.resource === p.resource);
      if (!ok) return oerr(res, 400, 'invalid_grant', 'unknown assertion');
      if (jag) jags.delete(p.assertion);
      log.auth.scopes.push(p.scope || '');
      log.auth.jwt_bearer_client = cid;
      const t = issue(cid, p.scope, jkt);
      refresh.delete(t.refresh_token); delete t.refresh_token;
      return json(res, 200, t);
    }
    return oerr(res, 400, 'unsupported_grant_type', g);
  }

  // The enterprise identity provider's token exchange (RFC 8693): its ID
  // token for an ID-JAG naming the authorization server and the resource.
  function idp_token(body, res) {
    const p = form(body);
    note('seen_subject_token', p.subject_token);
    log.auth.idp_exchanges = (log.auth.idp_exchanges || 0) + 1;
    log.auth.idp_request = { grant_type: p.grant_type, subject_token_type: p.subject_token_type,
      requested_token_type: p.requested_token_type, audience: p.audience, resource: p.resource, client_id: p.client_id };
    if (p.grant_type !== 'urn:ietf:params:oauth:grant-type:token-exchange') return oerr(res, 400, 'unsupported_grant_type', p.grant_type);
    if (!p.subject_token || p.subject_token !== opt('--idp-id-token', null)) return oerr(res, 400, 'invalid_grant', 'unknown ID token');
    if (p.subject_token_type !== 'urn:ietf:params:oauth:token-type:id_token' ||
        p.requested_token_type !== 'urn:ietf:params:oauth:token-type:id-jag') return oerr(res, 400, 'invalid_request', 'token types');
    const jag = rnd(24);
    jags.set(jag, { audience: p.audience, resource: p.resource });
    note('id_jag', jag);
    json(res, 200, { access_token: jag, issued_token_type: 'urn:ietf:params:oauth:token-type:id-jag', token_type: 'N_A' });
  }

  function authorize(u, res) {
    log.auth.authorize++;
    const q = Object.fromEntries(u.searchParams);
    const c = clients.get(q.client_id);
    if (!c) return oerr(res, 400, 'invalid_request', 'unknown client_id');
    if (c.redirect_uris && !c.redirect_uris.includes(q.redirect_uri)) return oerr(res, 400, 'invalid_request', 'redirect_uri not registered');
    if (q.response_type !== 'code') return oerr(res, 400, 'unsupported_response_type', 'code only');
    if (q.code_challenge_method !== 'S256' || !q.code_challenge) return oerr(res, 400, 'invalid_request', 'PKCE S256 required');
    if (q.resource !== resource()) return oerr(res, 400, 'invalid_target', 'unknown resource ' + q.resource);
    if (flag('--login') && !u.searchParams.get('approved')) {
      // a login page first: the user approves at /login, which comes back here
      const next = new URL(u.toString()); next.searchParams.set('approved', '1');
      log.auth.authorize--;
      res.writeHead(302, { Location: base + '/login?next=' + encodeURIComponent(next.pathname + next.search) });
      return res.end();
    }
    const to = new URL(q.redirect_uri);
    if (flag('--deny')) {
      to.searchParams.set('error', 'access_denied'); to.searchParams.set('error_description', 'the user said no');
    } else {
      const code = rnd(18);
      note('code', code);
      codes.set(code, { client_id: q.client_id, challenge: q.code_challenge, redirect_uri: q.redirect_uri, scope: q.scope, resource: q.resource });
      to.searchParams.set('code', code);
    }
    if (q.state) to.searchParams.set('state', q.state);
    const issuer = META_ISSUER || asBase();
    const iss = { correct: issuer, wrong: 'https://evil.example', slash: issuer + '/' }[ISS];
    if (iss) to.searchParams.set('iss', iss);
    res.writeHead(302, { Location: to.toString() });
    res.end();
  }

  function register(body, res) {
    let m;
    try { m = JSON.parse(body); } catch (e) { return oerr(res, 400, 'invalid_client_metadata', 'not JSON'); }
    const method = m.token_endpoint_auth_method || 'client_secret_basic';
    if (!METHODS.includes(method)) return oerr(res, 400, 'invalid_client_metadata', method + ' not supported');
    const cid = 'dyn-' + rnd(6);
    const c = { method, redirect_uris: m.redirect_uris || [] };
    if (method !== 'none') { c.secret = rnd(18); note('client_secret', c.secret); }
    clients.set(cid, c);
    log.auth.registrations++;
    log.auth.client_name = m.client_name;
    log.auth.application_type = m.application_type;
    log.auth.registered_at = (log.auth.registered_at || []).concat([asBase()]);
    json(res, 201, Object.assign({ client_id: cid, token_endpoint_auth_method: method, redirect_uris: c.redirect_uris },
      c.secret ? { client_secret: c.secret } : {}));
  }

  // The Bearer token of a request to /mcp: its record | null (res answered).
  function bearer(req, res) {
    const h = req.headers.authorization || '';
    const scheme = DPOP ? 'DPoP' : 'Bearer';
    const www = (extra) => scheme + ' resource_metadata="' + prmUrl() + '"' +
      (CHALLENGE_SCOPE ? ', scope="' + CHALLENGE_SCOPE + '"' : '') + (extra || '');
    if (!h.startsWith(scheme + ' ')) {
      log.auth.unauthenticated++;
      json(res, 401, { error: 'invalid_token', error_description: 'no token' }, { 'WWW-Authenticate': www() });
      return null;
    }
    const tok = h.slice(scheme.length + 1);
    note('seen_access', tok);
    const t = access.get(tok);
    if (DPOP && t) {
      const d = dpop_check(req, base + '/mcp', tok, DPOP_NONCE && 'rs-nonce-1');
      if (d.nonce) {
        log.auth.dpop.rs_nonce++;
        json(res, 401, { error: 'use_dpop_nonce' }, { 'WWW-Authenticate': 'DPoP error="use_dpop_nonce"', 'DPoP-Nonce': 'rs-nonce-1' });
        return null;
      }
      if (d.error || d.jkt !== t.jkt) {
        log.auth.dpop.bad.push(d.error || 'key binding');
        json(res, 401, { error: 'invalid_dpop_proof' }, { 'WWW-Authenticate': www(', error="invalid_dpop_proof"') });
        return null;
      }
    }
    if (!t || t.exp < Date.now() || flag('--reject-tokens')) {
      log.auth.rejected++;
      json(res, 401, { error: 'invalid_token', error_description: LEAKY ? 'token ' + tok + ' is not valid' : 'expired or unknown token' },
        { 'WWW-Authenticate': www(', error="invalid_token"') });
      return null;
    }
    return { token: tok, rec: t };
  }

  const server = http.createServer((req, res) => {
    const u = new URL(req.url, base);
    let body = '';
    req.on('data', (d) => { body += d; });
    req.on('end', () => {
      if (u.pathname === '/v1/chat/completions' && req.method === 'POST') {
        let m; try { m = JSON.parse(body); } catch (e) { return json(res, 400, { error: { message: 'bad json' } }); }
        const last = (m.messages || []).filter((x) => x.role === 'user').pop();
        return json(res, 200, { id: 'chatcmpl-ts', object: 'chat.completion', created: 1, model: m.model || 'ts-model',
          choices: [{ index: 0, message: { role: 'assistant', content: 'model says: ' + (last ? last.content : '') }, finish_reason: 'stop' }],
          usage: { prompt_tokens: 1, completion_tokens: 1, total_tokens: 2 } });
      }
      if (OAUTH) {
        if (u.pathname === '/.well-known/oauth-protected-resource/mcp' && req.method === 'GET') {
          const d = { resource: resource(), authorization_servers: [asBase()] };
          if (SCOPES) d.scopes_supported = SCOPES.split(' ');
          return json(res, 200, d);
        }
        if (u.pathname === '/.well-known/oauth-authorization-server' + asPrefix && req.method === 'GET') {
          const ab = asBase();
          const d = { issuer: META_ISSUER || ab, authorization_endpoint: ab + '/authorize', token_endpoint: ab + '/token',
            response_types_supported: ['code'],
            grant_types_supported: ['authorization_code', 'refresh_token', 'client_credentials', JWT_BEARER],
            token_endpoint_auth_methods_supported: METHODS };
          if (!flag('--no-dcr')) d.registration_endpoint = ab + '/register';
          if (!flag('--no-pkce')) d.code_challenge_methods_supported = ['S256'];
          if (SCOPES || opt('--as-scopes', null)) d.scopes_supported = opt('--as-scopes', SCOPES).split(' ');
          if (ISS && !flag('--iss-unadvertised')) d.authorization_response_iss_parameter_supported = true;
          if (DPOP) d.dpop_signing_alg_values_supported = ['ES256'];
          return json(res, 200, d);
        }
        if (u.pathname === '/admin/move-as' && req.method === 'POST') {
          asPrefix = '/as2'; clients = new Map(); access.clear(); refresh.clear();
          return json(res, 200, { moved_to: asBase() });
        }
        if (u.pathname === '/idp/token' && req.method === 'POST') return idp_token(body, res);
        // the authorization server's endpoints, under its current prefix
        if (asPrefix && !u.pathname.startsWith(asPrefix + '/') && ['/authorize', '/token', '/register'].includes(u.pathname)) {
          res.writeHead(404); return res.end('this authorization server has moved');
        }
        if (asPrefix && u.pathname.startsWith(asPrefix + '/')) u.pathname = u.pathname.slice(asPrefix.length);
        if (u.pathname === '/authorize' && req.method === 'GET') return authorize(u, res);
        if (u.pathname === '/login' && req.method === 'GET') {
          log.auth.logins = (log.auth.logins || 0) + 1;
          if (u.searchParams.get('user') !== 'ada') {
            res.writeHead(200, { 'Content-Type': 'text/html' });
            return res.end('<html><title>Sign in</title><form>user <input name=user></form></html>');
          }
          res.writeHead(302, { Location: base + u.searchParams.get('next') });
          return res.end();
        }
        if (u.pathname === '/token' && req.method === 'POST') return token_endpoint(req, body, res);
        if (u.pathname === '/register' && req.method === 'POST' && !flag('--no-dcr')) return register(body, res);
      }
      if (u.pathname !== '/mcp') { res.writeHead(404); return res.end('not found'); }
      let who = null;
      if (OAUTH) { who = bearer(req, res); if (!who) return; }
      serve_mcp(req, res, body, who);
    });
  });

  function serve_mcp(req, res, body, who) {
    if (req.method === 'DELETE') { log.deletes++; res.writeHead(200); return res.end(); }
    if (req.method === 'GET') {
      if (flag('--no-get')) { res.writeHead(405); return res.end(); }
      const last = req.headers['last-event-id'];
      log.gets.push(last || '');
      res.writeHead(200, { 'Content-Type': 'text/event-stream', 'Mcp-Session-Id': SID });
      if (parked && last) { const p = parked; parked = null; p(res); return; }
      res.write(': listening\n\n');
      listeners.push(res);
      res.on('close', () => { const i = listeners.indexOf(res); if (i >= 0) listeners.splice(i, 1); });
      return;
    }
    let msg;
    try { msg = JSON.parse(body); } catch (e) { res.writeHead(400); return res.end('bad json'); }
    const pv = req.headers['mcp-protocol-version'];
    const meta = (msg.params && msg.params._meta) || {};
    const mv = meta['io.modelcontextprotocol/protocolVersion'];
    if (!LEGACY && pv === MODERN) {
      // 2026-07-28: the headers must say what the body says
      const want = { 'mcp-method': msg.method };
      if (msg.method === 'tools/call' || msg.method === 'prompts/get') want['mcp-name'] = msg.params && msg.params.name;
      if (msg.method === 'resources/read') want['mcp-name'] = msg.params && msg.params.uri;
      let bad = mv !== pv && msg.method !== undefined && msg.id !== undefined ? 'MCP-Protocol-Version header does not match _meta' : null;
      for (const k of Object.keys(want)) {
        let v = req.headers[k];
        const b = /^=\?base64\?(.*)\?=$/.exec(v || '');
        if (b) v = Buffer.from(b[1], 'base64').toString('utf8');
        if (v !== want[k]) bad = bad || (k + ' header ' + JSON.stringify(req.headers[k]) + ' does not match the body');
      }
      log.mcp_headers.push({ method: req.headers['mcp-method'], name: req.headers['mcp-name'], session: req.headers['mcp-session-id'] || null });
      if (bad) {
        res.writeHead(400, { 'Content-Type': 'application/json' });
        return res.end(JSON.stringify({ jsonrpc: '2.0', id: msg.id === undefined ? null : msg.id, error: { code: -32020, message: bad } }));
      }
    } else if (msg.method !== 'initialize' && msg.method !== 'server/discover' && req.headers['mcp-session-id'] !== SID) {
      res.writeHead(400, { 'Content-Type': 'application/json' });
      return res.end(JSON.stringify({ jsonrpc: '2.0', id: null, error: { code: -32000, message: 'missing session' } }));
    }
    if (who && msg.method === 'tools/call' && msg.params && msg.params.name === 'admin' &&
        !who.rec.scope.split(' ').includes('mcp:admin')) {
      log.auth.forbidden++;
      return json(res, 403, { error: 'insufficient_scope' }, { 'WWW-Authenticate':
        'Bearer error="insufficient_scope", scope="mcp:admin", resource_metadata="' + prmUrl() + '"' });
    }
    if (msg.id === undefined || msg.method === undefined) {
      dispatch(msg, null);
      res.writeHead(202); return res.end();
    }
    const sse = msg.method === 'tools/call';
    const ask = (m) => {
      const l = listeners[listeners.length - 1];
      if (!l) return false;
      l.write('id: g' + (++eventId) + '\ndata: ' + JSON.stringify(m) + '\n\n');
      return true;
    };
    const revoke = () => { if (who) access.delete(who.token); };
    const sid = (!LEGACY && pv === MODERN) || msg.method === 'server/discover' ? {} : { 'Mcp-Session-Id': SID };
    if (!sse) {
      return handle(msg, { send: (m) => {
        res.writeHead(200, Object.assign({ 'Content-Type': 'application/json' }, sid));
        res.end(JSON.stringify(m));
      }, raw: () => {}, ask, revoke, headers: req.headers });
    }
    res.writeHead(200, Object.assign({ 'Content-Type': 'text/event-stream' }, sid));
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
      ask, revoke, headers: req.headers,
    };
    dispatch(msg, out);
  }

  server.listen(0, '127.0.0.1', () => {
    base = 'http://127.0.0.1:' + server.address().port;
    process.stdout.write('PORT ' + server.address().port + '\n');
  });
  process.on('SIGTERM', () => process.exit(0));
}
