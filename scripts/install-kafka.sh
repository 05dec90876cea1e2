#!/usr/bin/env bash
# Installs the Kafka broker the tests and the lab run (Apache Kafka 4.3.1 from Maven Central, one
# node in KRaft mode) and Debian's kcat, the independent client the tests check topics with.
# Idempotent and non-interactive; run as root on Debian 12 (scripts/install-peers.sh calls it).
#
#   bench/peers/kafka/pom.xml --mvn dependency:copy-dependencies--> $PEERS_DIR/kafka/lib/*.jar
#
# The jars are fetched again only when the pom changes. The broker itself is started by the
# tests and the lab (crates/loghaul-bench/src/kafka.rs), never as a service.
set -euo pipefail

PEERS_DIR="${LOGHAUL_PEERS_DIR:-/opt/loghaul-peers}"
ROOT="$(cd "$(dirname "$0")/.." && pwd)"
POM="$ROOT/bench/peers/kafka/pom.xml"
LIB="$PEERS_DIR/kafka/lib"
export DEBIAN_FRONTEND=noninteractive

if ! command -v kcat >/dev/null 2>&1 || ! command -v java >/dev/null 2>&1 || ! command -v mvn >/dev/null 2>&1; then
    apt-get update -qq </dev/null
    command -v kcat >/dev/null 2>&1 || apt-get install -y -qq kcat </dev/null >/dev/null
    command -v java >/dev/null 2>&1 || apt-get install -y -qq openjdk-17-jre-headless </dev/null >/dev/null
    command -v mvn >/dev/null 2>&1 || apt-get install -y -qq maven </dev/null >/dev/null
fi

stamp="$(sha256sum "$POM" | cut -d' ' -f1)"
if [ -f "$LIB/.stamp" ] && [ "$(cat "$LIB/.stamp")" = "$stamp" ]; then
    echo "install-kafka.sh: broker jars up to date in $LIB"
    exit 0
fi
rm -rf "$LIB"
mkdir -p "$LIB"
mvn -q -B -f "$POM" dependency:copy-dependencies -DoutputDirectory="$LIB" </dev/null
echo "$stamp" > "$LIB/.stamp"
echo "install-kafka.sh: $(ls "$LIB" | grep -c '\.jar$') jars in $LIB"
