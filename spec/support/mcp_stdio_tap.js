// A tap in front of a stdio MCP server for the specs: it starts the server
// (the arguments after the log file), passes every byte both ways, and
// appends one line per request it passes to the server, with the time it
// passed it: { t_ms (Date.now()), method, name (a tool's), id }, and one per
// notifications/cancelled (id: the request it cancels). What the
// server was asked, and when, seen from outside the gateway.
//
//   node mcp_stdio_tap.js LOG command args...
"use strict";
const fs = require("fs");
const { spawn } = require("child_process");

const [log, cmd, ...args] = process.argv.slice(2);
const child = spawn(cmd, args, { stdio: ["pipe", "pipe", "inherit"] });
let pending = "";
process.stdin.on("data", (chunk) => {
  pending += chunk.toString("utf8");
  let nl;
  while ((nl = pending.indexOf("\n")) >= 0) {
    const line = pending.slice(0, nl);
    pending = pending.slice(nl + 1);
    try {
      const m = JSON.parse(line);
      if (m.method && m.id !== undefined) {
        fs.appendFileSync(log, JSON.stringify({ t_ms: Date.now(), method: m.method, id: m.id,
                                                name: m.params && m.params.name }) + "\n");
      } else if (m.method === "notifications/cancelled") {
        fs.appendFileSync(log, JSON.stringify({ t_ms: Date.now(), method: m.method,
                                                id: m.params && m.params.requestId }) + "\n");
      }
    } catch (e) { /* not JSON: the server says so itself */ }
    child.stdin.write(line + "\n");
  }
});
process.stdin.on("end", () => child.stdin.end());
// stopped (SIGTERM right after the last lines were written to it): it still
// reads and logs what it was sent, and ends when stdin ends (the server
// with it)
process.on("SIGTERM", () => {});
child.stdout.pipe(process.stdout);
child.on("exit", (code, sig) => process.exit(code === null ? 1 : code));
