// examples/experiment/model.js — the experiment's model: an OpenAI-compatible
// chat endpoint on loopback (POST /v1/chat/completions, whole or streamed).
//
//   node examples/experiment/model.js [--port N] [--think MS]
//
// It stands in for a real model, deterministically and offline: it decides
// each turn from the conversation it is sent, nothing else. The user message
// names the first note ("starting at case2_1.txt") and the summary file
// ("write their facts to summary_case2.txt"); after each read_text_file
// result it reads the note that result names ("next: case2_2.txt"); after
// the last note ("end of notes") it writes every "fact:" line it was shown
// to the summary with write_file; after the write it answers with the facts.
// A wrong observation in the conversation therefore changes what it does,
// as it would with a real model.
//
// Each answer takes about --think ms (default 40, env EXPERIMENT_THINK_MS),
// between 0.75 and 1.25 times that, fixed per request (a hash of its body),
// so a replayed request takes what it took. Streamed, the tool's name comes
// at 60 % of that time (the moment action speculation can fire on it), the
// arguments at the end. GET /health answers "ok". The port: --port, else
// EXPERIMENT_PORT, else 18790; 0 picks a free one. It prints
// "model: listening on http://127.0.0.1:PORT" once it accepts connections.
'use strict';
const http = require('http');
const crypto = require('crypto');

const argv = process.argv.slice(2);
const opt = (n, d) => { const i = argv.indexOf(n); return i >= 0 && i + 1 < argv.length ? argv[i + 1] : d; };
const PORT = Number(opt('--port', process.env.EXPERIMENT_PORT || '18790'));
const THINK = Number(opt('--think', process.env.EXPERIMENT_THINK_MS || '40'));
if (!Number.isInteger(PORT) || PORT < 0 || PORT > 65535) { console.error('model: bad --port'); process.exit(2); }
if (!(THINK >= 0)) { console.error('model: bad --think'); process.exit(2); }

// The next move, from the messages alone: { tool, args } or { content }.
function decide(messages) {
  const user = messages.find((m) => m.role === 'user');
  const ask = user && typeof user.content === 'string' ? user.content : '';
  const start = (ask.match(/starting at (\S+?\.txt)/) || [])[1];
  const summary = (ask.match(/facts to (\S+?\.txt)/) || [])[1];
  const label = (ask.match(/^(Case \d+)/) || [])[1] || 'the case';
  if (!start || !summary) return { content: 'I cannot tell which notes to read from: ' + ask };
  // the tool each call id was, so a tool message can be read in context
  const tool_of = {};
  for (const m of messages) {
    for (const c of (m.role === 'assistant' && m.tool_calls) || []) tool_of[c.id] = c.function && c.function.name;
  }
  const facts = [];
  let last = null;
  for (const m of messages) {
    if (m.role !== 'tool') continue;
    const text = typeof m.content === 'string' ? m.content : '';
    last = { tool: tool_of[m.tool_call_id], text };
    if (last.tool === 'read_text_file') for (const f of text.matchAll(/^fact: (.*)$/gm)) facts.push(f[1]);
  }
  if (!last) return { tool: 'read_text_file', args: { path: start } };
  if (last.tool === 'read_text_file') {
    const next = (last.text.match(/^next: (\S+)$/m) || [])[1];
    if (next) return { tool: 'read_text_file', args: { path: next } };
    return { tool: 'write_file', args: { path: summary, content: facts.map((f) => f + '\n').join('') } };
  }
  if (last.tool === 'write_file') return { content: label.toLowerCase() + ': ' + facts.join('; ') };
  return { content: 'I did not expect a result from ' + last.tool };
}

function think_ms(body) {
  const h = crypto.createHash('sha256').update(body).digest().readUInt32BE(0) / 0x100000000;
  return THINK * (0.75 + 0.5 * h);
}

function chunk(id, delta, finish) {
  return 'data: ' + JSON.stringify({ id, object: 'chat.completion.chunk', created: 1, model: 'notes-model',
    choices: [{ index: 0, delta, finish_reason: finish || null }] }) + '\n\n';
}

function answer(req, res, body) {
  let m;
  try { m = JSON.parse(body); } catch (e) { return send(res, 400, { error: { message: 'the body is not JSON' } }); }
  if (!m || !Array.isArray(m.messages)) return send(res, 400, { error: { message: 'messages must be a list' } });
  const move = decide(m.messages);
  const ncalls = m.messages.filter((x) => x.role === 'assistant').length;
  const call = move.tool && { id: 'call_' + (ncalls + 1), type: 'function',
    function: { name: move.tool, arguments: JSON.stringify(move.args) } };
  const t = think_ms(body);
  const id = 'chatcmpl-' + (ncalls + 1);
  if (!m.stream) {
    return setTimeout(() => send(res, 200, { id, object: 'chat.completion', created: 1, model: 'notes-model',
      choices: [{ index: 0, finish_reason: call ? 'tool_calls' : 'stop',
                  message: call ? { role: 'assistant', content: null, tool_calls: [call] }
                                : { role: 'assistant', content: move.content } }] }), t);
  }
  res.writeHead(200, { 'Content-Type': 'text/event-stream', 'Cache-Control': 'no-cache' });
  const first = call
    ? { role: 'assistant', content: null, tool_calls: [{ index: 0, id: call.id, type: 'function',
                                                         function: { name: call.function.name, arguments: '' } }] }
    : { role: 'assistant', content: move.content.slice(0, 12) };
  const rest = call ? { tool_calls: [{ index: 0, function: { arguments: call.function.arguments } }] }
                    : { content: move.content.slice(12) };
  const timers = [
    setTimeout(() => res.write(chunk(id, first)), 0.6 * t),
    setTimeout(() => res.end(chunk(id, rest, call ? 'tool_calls' : 'stop') + 'data: [DONE]\n\n'), t),
  ];
  // a cancelled request (the client discarded that thread) stops here
  res.on('close', () => timers.forEach(clearTimeout));
}

function send(res, status, obj) {
  const b = JSON.stringify(obj);
  res.writeHead(status, { 'Content-Type': 'application/json', 'Content-Length': Buffer.byteLength(b) });
  res.end(b);
}

const server = http.createServer((req, res) => {
  const parts = [];
  req.on('data', (d) => parts.push(d));
  req.on('end', () => {
    const body = Buffer.concat(parts).toString('utf8');
    const path = req.url.split('?')[0];
    if (path === '/health') { res.writeHead(200, { 'Content-Type': 'text/plain' }); return res.end('ok'); }
    if (path === '/v1/chat/completions' && req.method === 'POST') return answer(req, res, body);
    send(res, 404, { error: { message: 'not found: ' + req.method + ' ' + path } });
  });
});
server.on('error', (e) => { console.error('model: ' + e.message); process.exit(1); });
server.listen(PORT, '127.0.0.1', () => {
  console.log('model: listening on http://127.0.0.1:' + server.address().port);
});
for (const s of ['SIGTERM', 'SIGINT']) process.on(s, () => { server.close(); process.exit(0); });
