#!/usr/bin/env node
// Sends COUNT numbered events with npm @fluent-org/logger's FluentClient (forward protocol).
//
//   node send.mjs --port P --tag T --count N --run R
//        [--mode Message|Forward|PackedForward|CompressedPackedForward] [--ack]
//        [--shared-key K --hostname H [--username U --password W]] [--milliseconds]
//        [--batch B] [--timeout-ms MS] [--host H]
//        [--tls-ca CA.pem [--tls-cert C.pem --tls-key K.pem] [--servername NAME]]
//
// Exits 0 only if every emit resolved (with --ack: only once the server acked it); otherwise prints
// the client's own error on stderr (for a refused handshake it carries the server's PONG reason) and
// exits 1. The last stdout line is a JSON summary.
import {readFileSync} from "node:fs";
import {parseArgs} from "node:util";
import {FluentClient} from "@fluent-org/logger";

const {values: a} = parseArgs({
  options: {
    host: {type: "string", default: "127.0.0.1"},
    port: {type: "string"},
    tag: {type: "string"},
    count: {type: "string"},
    run: {type: "string"},
    mode: {type: "string", default: "Message"},
    ack: {type: "boolean", default: false},
    "shared-key": {type: "string"},
    hostname: {type: "string"},
    username: {type: "string"},
    password: {type: "string"},
    milliseconds: {type: "boolean", default: false},
    // Events emitted in one tick share one request in the Forward modes; --batch B sends B events per
    // request (awaiting each batch) instead of all COUNT in one. 0 means all at once.
    batch: {type: "string", default: "0"},
    "timeout-ms": {type: "string", default: "5000"},
    // TLS (the library's `socket.tls`, Node's tls.connect options): the CA that signed the
    // server's certificate, and a client certificate for mutual TLS.
    "tls-ca": {type: "string"},
    "tls-cert": {type: "string"},
    "tls-key": {type: "string"},
    servername: {type: "string"},
  },
});
for (const k of ["port", "tag", "count", "run"]) {
  if (a[k] === undefined) usage(`--${k} is required`);
}
if (!["Message", "Forward", "PackedForward", "CompressedPackedForward"].includes(a.mode)) usage(`unknown --mode ${a.mode}`);
if (a["shared-key"] !== undefined && a.hostname === undefined) usage("--shared-key needs --hostname");
if ((a.username === undefined) !== (a.password === undefined)) usage("--username and --password go together");
if (a.username !== undefined && a["shared-key"] === undefined) usage("--username needs --shared-key");
const count = Number(a.count);
const timeoutMs = Number(a["timeout-ms"]);
if (!Number.isInteger(count) || count < 0) usage(`--count must be a whole number, got ${a.count}`);
if (!(timeoutMs > 0)) usage(`--timeout-ms must be positive, got ${a["timeout-ms"]}`);
const batch = Number(a.batch) > 0 ? Number(a.batch) : Math.max(count, 1);

function usage(msg) {
  console.error(`send.mjs: ${msg}`);
  process.exit(2);
}

// console.error writes synchronously to files and pipes on Linux, so exiting right after is safe.
function fail(what, err) {
  console.error(`send.mjs: ${what}: ${err?.name ?? "Error"}: ${err?.message ?? err}`);
  process.exit(1);
}

const record = i => ({
  n: i,
  message: `event ${i}`,
  run: a.run,
  nested: {list: [1, "two", 3.5, true, null], map: {k: "v"}},
});

const client = new FluentClient(a.tag, {
  eventMode: a.mode,
  socket: {
    host: a.host,
    port: Number(a.port),
    // Idle timeout of the socket (the library's default is 3 s).
    timeout: timeoutMs,
    // One connection per run: a test then knows exactly how many connections and handshakes it saw,
    // and a dropped connection fails the run (through the watchdog) instead of being retried quietly.
    disableReconnect: true,
    tls:
      a["tls-ca"] === undefined
        ? undefined
        : {
            ca: readFileSync(a["tls-ca"]),
            cert: a["tls-cert"] === undefined ? undefined : readFileSync(a["tls-cert"]),
            key: a["tls-key"] === undefined ? undefined : readFileSync(a["tls-key"]),
            servername: a.servername,
          },
  },
  // Without `ack` the library sends no chunk id; the default ackTimeout (500 ms) is too short for a
  // loaded CI machine.
  ack: a.ack ? {ackTimeout: timeoutMs} : undefined,
  security:
    a["shared-key"] === undefined
      ? undefined
      : {clientHostname: a.hostname, sharedKey: a["shared-key"], username: a.username, password: a.password},
  // true: EventTime (ext 0) with millisecond resolution; false: integer seconds.
  milliseconds: a.milliseconds,
});

// Every socket error is fatal here: a refused connection, a PONG with auth_result false
// ("AuthError: Authentication failed: <reason>"), a HELO the client did not expect, a bad PONG digest.
// The library itself only emits the error and leaves the emits pending.
client.socketOn("error", err => fail("socket error", err));

// Watchdog: fail when nothing moved for timeout-ms (no handshake, a socket that closed and will not
// reconnect). Progress is the connection becoming writable or an emit resolving. It allows a second
// more than the ack timeout, so that a missing ack fails with the library's own AckTimeoutError.
let lastProgress = Date.now();
let stage = "connect and handshake";
// Attached before connecting: without security the library emits "established" inside the connect.
const established = new Promise(resolve => client.socketOn("established", resolve));
const watchdog = setInterval(() => {
  if (Date.now() - lastProgress > timeoutMs + 1000) {
    fail("timeout", new Error(`no progress within ${timeoutMs + 1000} ms (${stage})`));
  }
}, 50);

try {
  await client.connect();
  await established;
  lastProgress = Date.now();
  stage = a.ack ? "sending and waiting for acks" : "sending";
  for (let start = 0; start < count; start += batch) {
    const pending = [];
    for (let i = start; i < Math.min(count, start + batch); i++) {
      pending.push(client.emit(record(i)).then(() => (lastProgress = Date.now())));
    }
    await Promise.all(pending);
  }
  stage = "shutdown";
  // Everything is written (and acked); shutdown flushes the empty queue and ends the socket.
  await client.shutdown();
} catch (err) {
  fail(stage, err);
}
clearInterval(watchdog);

const {version} = JSON.parse(
  readFileSync(new URL("./node_modules/@fluent-org/logger/package.json", import.meta.url), "utf8")
);
console.log(
  JSON.stringify({
    sent: count,
    client: "node-fluent-org-logger",
    version,
    mode: a.mode,
    ack: a.ack,
    auth: a["shared-key"] !== undefined,
    user_auth: a.username !== undefined,
    milliseconds: a.milliseconds,
    tls: a["tls-ca"] !== undefined,
  })
);
process.exit(0);
