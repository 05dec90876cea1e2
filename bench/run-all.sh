#!/usr/bin/env bash
# Runs every scenario of the lab at full size, with the `bare` loop as the yardstick where it has one, and
# leaves the tables, raw runs and charts in bench/results/YYYY-MM-DD/.
# Usage: [OUT=DIR] bench/run-all.sh [path/to/loghaul] [extra `bench run` options]
# OUT picks the results folder (default bench/results/YYYY-MM-DD); `--out` among the extra
# options would be given twice, which `bench run` refuses.
#
# The peers must be installed first: sudo scripts/install-peers.sh (idempotent).
set -euo pipefail
cd "$(dirname "$0")/.."

LOGHAUL="${1:-target/release/loghaul}"
shift || true
if [ ! -x "$LOGHAUL" ]; then
    echo "building $LOGHAUL" >&2
    cargo build --release --bin loghaul
fi
[ -f /opt/loghaul-peers/env.sh ] && . /opt/loghaul-peers/env.sh

OUT="${OUT:-bench/results/$(date +%F)}"
"$LOGHAUL" bench run syslog  --subjects loghaul,rsyslog,syslog-ng,otelcol,bare      --runs 3 --out "$OUT" "$@"
"$LOGHAUL" bench run basic   --subjects loghaul,rsyslog,syslog-ng,eventmachine,bare --runs 3 --out "$OUT" "$@"
"$LOGHAUL" bench run raw     --subjects loghaul,rsyslog,syslog-ng,bare              --runs 3 --out "$OUT" "$@"
"$LOGHAUL" bench run rfc5424 --subjects loghaul,rsyslog,syslog-ng,bare              --runs 3 --out "$OUT" "$@"
# TLS: loghaul and rsyslog (imtcp + GnuTLS) beside their plaintext selves, in their own folder so
# the plain `syslog` set above keeps its table; then new TLS clients per second.
"$LOGHAUL" bench run syslog --subjects loghaul,loghaul-tls,rsyslog,rsyslog-tls --runs 5 --out "$OUT/syslog-tls" "$@"
"$LOGHAUL" bench run tls_handshake --subjects loghaul-tls,rsyslog-tls,loghaul,rsyslog --runs 5 --out "$OUT" "$@"
# Fluentd cannot be installed from the registries these machines reach: it joins the forward
# scenarios (and the tree below) as a subject only when LOGHAUL_FLUENTD names a `fluentd` command.
fwd_subjects=loghaul,otelcol,bare
[ -n "${LOGHAUL_FLUENTD:-}" ] && fwd_subjects=loghaul,fluentd,otelcol,bare
"$LOGHAUL" bench run forward --subjects "$fwd_subjects"                          --runs 3 --out "$OUT" "$@"
"$LOGHAUL" bench run forward_relay --subjects loghaul                            --runs 3 --out "$OUT" "$@"
# The peer-deliver tree climbs rate steps once per subject (no --runs): 10 agents → 2 delivers →
# 2 receivers, 10s per step, until a step is not sustained.
tree_subjects=loghaul
[ -n "${LOGHAUL_FLUENTD:-}" ] && tree_subjects=loghaul,fluentd
"$LOGHAUL" bench run forward_deliver --subjects "$tree_subjects"                           --out "$OUT" "$@"
# One file of 5M lines, written before any subject starts, read from its beginning into JSON
# lines. Fluent Bit and Vector would be its peers, but neither is in Debian's repositories; the
# OpenTelemetry Collector's file_log receiver is.
"$LOGHAUL" bench run tail    --subjects loghaul,otelcol,bare                      --runs 3 --out "$OUT" "$@"
# OTLP/HTTP protobuf log export into loghaul's opentelemetry source and the Collector's otlp receiver.
"$LOGHAUL" bench run otlp    --subjects loghaul,otelcol                           --runs 3 --out "$OUT" "$@"
# Key=value messages parsed, reshaped and routed by severity into two files: loghaul on its VRL
# fast path and on the VRL runtime, beside syslog-ng and rsyslog (no bare loop: it has no transforms).
"$LOGHAUL" bench run transform --subjects loghaul,loghaul-vrl,rsyslog,syslog-ng   --runs 3 --out "$OUT" "$@"
# loghaul on both sides of a Kafka broker (scripts/install-kafka.sh), beside Kafka's own producer
# and consumer perf tools on the same broker and topic.
"$LOGHAUL" bench run kafka_pipeline                                              --runs 3 --out "$OUT" "$@"
# The HTTP experiments: servers under ab and wrk, clients moving the same bytes, and NDJSON ingest.
"$LOGHAUL" bench run http_echo   --out "$OUT" "$@"
"$LOGHAUL" bench run http_client --out "$OUT" "$@"
bench/http-ingest.sh "$LOGHAUL" | tee "$OUT/http-ingest.txt"
echo "results in $OUT" >&2
