#!/usr/bin/env bash
# NDJSON ingest into a file sink: wrk POSTs the same 1,000-event NDJSON body over keep-alive
# connections to loghaul's http_server (acknowledgements on: every 200 means the file sink wrote
# the events), for a fixed time. Prints wrk's report, the events/s it implies, the lines the file
# really holds and loghaul's CPU seconds per million events.
#
#   bench/http-ingest.sh [LOGHAUL_BIN] [DURATION_S] [CONNECTIONS] [EVENTS_PER_REQUEST]
#
# Defaults: target/release/loghaul, 10 s, 8 connections, 1,000 events per request. Needs wrk
# (scripts/install-peers.sh installs it). Everything runs on 127.0.0.1 and is removed afterwards.
set -euo pipefail
cd "$(dirname "$0")/.."
bin="${1:-target/release/loghaul}"
duration="${2:-10}"
connections="${3:-8}"
per_request="${4:-1000}"
wrk="${LOGHAUL_WRK:-$(command -v wrk || true)}"
[ -x "$wrk" ] || { echo "http-ingest.sh: wrk not found (run scripts/install-peers.sh)" >&2; exit 1; }
[ -x "$bin" ] || { echo "http-ingest.sh: $bin not found (cargo build --release)" >&2; exit 1; }

work="$(mktemp -d)"
pid=""
cleanup() {
    if [ -n "$pid" ]; then kill "$pid" 2>/dev/null || true; wait "$pid" 2>/dev/null || true; fi
    rm -rf "$work"
}
trap cleanup EXIT

free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
port="$(free_port)"
api="$(free_port)"

# One request body: per_request events of about 200 bytes, as an access log would send.
python3 - "$work/body.ndjson" "$per_request" <<'EOF'
import json, sys
path, n = sys.argv[1], int(sys.argv[2])
with open(path, "w") as f:
    for i in range(n):
        f.write(json.dumps({"seq": i, "host": f"web-{i % 16:02}", "level": "info",
                            "method": "GET", "path": f"/api/v1/items/{i}", "status": 200,
                            "message": f"served item {i} to client {i * 31 % 10000} in {i % 250} ms"},
                           separators=(",", ":")) + "\n")
EOF
cat >"$work/post.lua" <<EOF
-- wrk: POST the same NDJSON body on every request.
wrk.method = "POST"
wrk.headers["Content-Type"] = "application/x-ndjson"
local f = assert(io.open("$work/body.ndjson", "rb"))
wrk.body = f:read("*a")
f:close()
EOF
cat >"$work/loghaul.yaml" <<EOF
data_dir: "$work/data"
api: { address: "127.0.0.1:$api" }
sources:
  web: { type: http_server, address: "127.0.0.1:$port", acknowledgements: true }
sinks:
  out: { type: file, inputs: [web], path: "$work/out.jsonl", encoding: json }
EOF

"$bin" run -c "$work/loghaul.yaml" 2>"$work/loghaul.log" &
pid=$!
for _ in $(seq 100); do
    curl -sf "http://127.0.0.1:$port/health" >/dev/null 2>&1 && break
    sleep 0.1
done
cpu() { awk '{print $14 + $15}' "/proc/$pid/stat"; }
cpu0="$(cpu)"
"$wrk" -t2 -c"$connections" -d"${duration}s" --latency -s "$work/post.lua" "http://127.0.0.1:$port/" | tee "$work/wrk.txt"
cpu1="$(cpu)"
kill "$pid"
wait "$pid" 2>/dev/null || true
pid=""
lines="$(wc -l <"$work/out.jsonl")"
rps="$(awk '/^Requests\/sec:/ {print $2}' "$work/wrk.txt")"
awk -v rps="$rps" -v n="$per_request" -v lines="$lines" -v d="$duration" \
    -v ticks="$((cpu1 - cpu0))" -v hz="$(getconf CLK_TCK)" 'BEGIN {
    printf "\nhttp-ingest: %.0f events/s acknowledged (%.1f requests/s x %d events); the file holds %d lines (%.0f/s over %d s); loghaul %.2f CPU-s per 1M events\n",
        rps * n, rps, n, lines, lines / d, d, (ticks / hz) / (lines / 1e6)
}'
