#!/usr/bin/env node
// An independent forward-protocol server (npm @fluent-org/logger's FluentServer), to test a forward
// client such as loghaul's forward sink against.
//
//   node receive.mjs --port P --out FILE [--host H]
//        [--shared-key K [--hostname H] [--user U:W ...]]
//
// Appends one JSON line per event to FILE, written synchronously so a test can read the file while
// this runs: {"tag": T, "time": SECONDS, "event_time": [SEC, NSEC], "record": {...}}. "time" is the
// integer the client sent, or seconds + nanoseconds / 1e9 for an EventTime (a float: it cannot hold
// every nanosecond); "event_time" is present only for an EventTime and is exact. A msgpack bin value in
// a record is written as {"$bin": "<base64>"}, so a test can tell it from a str.
//
// Prints "listening <port>" once it accepts connections (--port 0 picks a free port). Acks every
// request whose option has a chunk id (FluentServer does that itself). Exits 0 on SIGTERM or SIGINT.
import {openSync, writeSync, closeSync} from "node:fs";
import {parseArgs} from "node:util";
import {FluentServer, EventTime} from "@fluent-org/logger";

const {values: a} = parseArgs({
  options: {
    host: {type: "string", default: "127.0.0.1"},
    port: {type: "string"},
    out: {type: "string"},
    "shared-key": {type: "string"},
    // The server's self_hostname, sent in PONG; it must differ from the client's hostname.
    hostname: {type: "string", default: "fluent-node-receiver"},
    user: {type: "string", multiple: true, default: []},
  },
});
if (a.port === undefined || a.out === undefined) usage("--port and --out are required");
if (a.user.length > 0 && a["shared-key"] === undefined) usage("--user needs --shared-key");
const users = {};
for (const u of a.user) {
  const colon = u.indexOf(":");
  if (colon < 0) usage(`--user takes USER:PASSWORD, got ${u}`);
  users[u.slice(0, colon)] = u.slice(colon + 1);
}

function usage(msg) {
  console.error(`receive.mjs: ${msg}`);
  process.exit(2);
}

const server = new FluentServer({
  listenOptions: {host: a.host, port: Number(a.port)},
  security:
    a["shared-key"] === undefined
      ? undefined
      : {serverHostname: a.hostname, sharedKey: a["shared-key"], authorize: a.user.length > 0, userDict: users},
});

const out = openSync(a.out, "a");
// Buffer.toJSON runs before a replacer sees the value, so look at the raw value through `this`.
function binAsBase64(key, value) {
  const raw = this[key];
  return raw instanceof Uint8Array ? {$bin: Buffer.from(raw).toString("base64")} : value;
}
server.on("entry", (tag, time, record) => {
  const line =
    time instanceof EventTime
      ? {tag, time: time.epoch + time.nano / 1e9, event_time: [time.epoch, time.nano], record}
      : {tag, time, record};
  writeSync(out, JSON.stringify(line, binAsBase64) + "\n");
});

// FluentServer attaches no "error" listener to its net.Server; without one a failed listen
// (EADDRINUSE) would throw from an event emitter instead of saying what happened.
server.server.on("error", err => {
  console.error(`receive.mjs: listen on ${a.host}:${a.port}: ${err.message}`);
  process.exit(1);
});
// Lines are written synchronously, so there is nothing to flush: stop at once, even if a client keeps
// its connection open (FluentServer.close would wait for every client to hang up).
for (const signal of ["SIGTERM", "SIGINT"]) {
  process.on(signal, () => {
    closeSync(out);
    process.exit(0);
  });
}
await server.listen();
console.log(`listening ${server.port}`);
