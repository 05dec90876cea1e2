#!/usr/bin/env bash
# Installs the peers that `loghaul bench run` compares loghaul with, and the real syslog clients the
# integration tests use. Idempotent and non-interactive (CI=true, no stdin); run as root on Debian 12.
#
#   rsyslog (+ rsyslog-gnutls, rsyslog-openssl), bsdutils (logger), openssl,
#   ruby + ruby-eventmachine, tmux, chromium + chromium-driver -> installed with apt
#   syslog-ng-core (syslog-ng, loggen)                      -> extracted privately into $PEERS_DIR/syslog-ng
#
# and the peers of the HTTP experiments (programs, command lines, credits: bench/peers/http/README.md):
#
#   ab (apache2-utils), wrk, curl, ruby-curb, ruby-em-http-request -> installed with apt
#   node (the machine's; Debian nodejs where there is none)         -> runs the Node.js echo server
#   tornado, requests, urllib3 (bench/peers/http/requirements.txt)  -> venv $PEERS_DIR/http-venv
#   Finagle echo server (Maven: finagle-http_2.13 24.2.0)            -> $PEERS_DIR/finagle, run by
#                                                                      $PEERS_DIR/bin/finagle-echo
#   Kafka broker (Maven: kafka_2.13 4.3.1) and kcat (scripts/install-kafka.sh) -> $PEERS_DIR/kafka
#
# and the OpenTelemetry peer (what it is, versions, components, credits: bench/peers/otelcol/README.md):
#
#   otelcol-loghaul, a custom OpenTelemetry Collector       -> $PEERS_DIR/otelcol/otelcol-loghaul,
#   (Go modules: collector v0.165.0, contrib v0.165.1)         built by `go build` with the machine's Go
#                                                              (not Debian's golang-go: too old); module
#                                                              and build caches in $PEERS_DIR/go
#
# Why syslog-ng is private: rsyslog and syslog-ng-core conflict as Debian packages (installing one
# removes the other), so syslog-ng is unpacked with `apt-get download` + `dpkg -x` and only its library
# dependencies are installed with apt. Nothing here enables or starts a system service: the bench runs
# every peer as an ordinary foreground process with a private config.
#
# Every part stops the script on failure except the Finagle build: Maven Central may be out of reach,
# and the lab reports a missing peer as unsupported, so a failed build only warns. The Collector build
# does stop it: the tests need the Collector. The venv, the Finagle build and the Collector build record
# a fingerprint of their inputs and are redone only when it changes, so a second run does no network
# work.
#
# Afterwards the bench finds the peers at the fixed paths printed at the end (or via the env vars
# LOGHAUL_RSYSLOGD, LOGHAUL_SYSLOG_NG, LOGHAUL_SYSLOG_NG_MODULES, LOGHAUL_LOGGEN, LOGHAUL_RUBY,
# LOGHAUL_NODE, LOGHAUL_HTTP_PYTHON, LOGHAUL_FINAGLE_ECHO (only when built), LOGHAUL_AB, LOGHAUL_WRK,
# LOGHAUL_CURL, LOGHAUL_OTELCOL, all in $PEERS_DIR/env.sh).
set -euo pipefail

PEERS_DIR="${LOGHAUL_PEERS_DIR:-/opt/loghaul-peers}"
SNG_DIR="$PEERS_DIR/syslog-ng"
ROOT="$(cd "$(dirname "$0")/.." && pwd)"
HTTP_PEERS="$ROOT/bench/peers/http"
export DEBIAN_FRONTEND=noninteractive

if [ "$(id -u)" -ne 0 ]; then
    echo "install-peers.sh: must run as root (it uses apt-get)" >&2
    exit 1
fi

# `apt-get update` at most once per run, and only when a package is actually missing or its lists are
# absent: repeated runs on a provisioned machine then touch no network.
updated=0
apt_update_once() {
    if [ "$updated" -eq 0 ]; then
        apt-get update -qq </dev/null
        updated=1
    fi
}

have_pkg() {
    dpkg-query -W -f='${Status}' "$1" 2>/dev/null | grep -q "install ok installed"
}

apt_install() {
    local missing=()
    for p in "$@"; do
        have_pkg "$p" || missing+=("$p")
    done
    if [ "${#missing[@]}" -gt 0 ]; then
        apt_update_once
        # --no-install-recommends keeps rsyslog from pulling logrotate and friends; policy-rc.d below
        # keeps the package from starting a system rsyslog.
        apt-get install -y -qq --no-install-recommends "${missing[@]}" </dev/null
    fi
}

# Refuse service starts during package installation (rsyslog's postinst would otherwise try to start
# the system daemon where an init system exists). Removed again on exit.
POLICY=/usr/sbin/policy-rc.d
policy_created=0
if [ ! -e "$POLICY" ]; then
    printf '#!/bin/sh\nexit 101\n' >"$POLICY"
    chmod +x "$POLICY"
    policy_created=1
fi
cleanup() {
    if [ "$policy_created" -eq 1 ]; then rm -f "$POLICY"; fi
}
trap cleanup EXIT

apt_install rsyslog bsdutils ruby ruby-eventmachine
# rsyslog's TLS network stream drivers (gtls: GnuTLS, ossl: OpenSSL), for syslog over TLS; openssl for
# s_client, the other real TLS client the tests drive.
apt_install rsyslog-gnutls rsyslog-openssl openssl
# The HTTP experiments' load tools and Ruby clients (Net::HTTP comes with ruby itself).
apt_install apache2-utils wrk curl ruby-curb ruby-em-http-request
# A terminal for the tests of `loghaul top` (driven as a person would: send-keys, capture-pane), and
# a real browser with its WebDriver for the tests of the console.
apt_install tmux chromium chromium-driver

# syslog-ng: private extraction. Its library dependencies are installed by apt; the package itself is not.
# The libraries are checked on every run (a no-op when present): a kept /opt with a fresh system would
# otherwise have the binary but not what it links against.
apt_install libcap2 libglib2.0-0 libivykis0 libjson-c5 libnet1 libpcre3 libssl3 libsystemd0 libwrap0
SNG_BIN="$SNG_DIR/usr/sbin/syslog-ng"
if [ ! -x "$SNG_BIN" ]; then
    work="$(mktemp -d)"
    (
        cd "$work"
        if ! apt-get download syslog-ng-core </dev/null >/dev/null 2>&1; then
            apt_update_once
            apt-get download syslog-ng-core </dev/null
        fi
        mkdir -p "$SNG_DIR"
        dpkg -x syslog-ng-core_*.deb "$SNG_DIR"
    )
    rm -rf "$work"
fi

SNG_MODULES="$SNG_DIR/usr/lib/syslog-ng/3.38"
if [ ! -d "$SNG_MODULES" ]; then
    # Find the module folder whatever the version number is.
    SNG_MODULES="$(find "$SNG_DIR/usr/lib/syslog-ng" -mindepth 1 -maxdepth 1 -type d -name '[0-9]*' | head -n1)"
fi
# Debian keeps libsyslog-ng-*.so in /usr/lib/syslog-ng (found there through the binary's RUNPATH, which
# points at the system path, hence LD_LIBRARY_PATH in the wrappers).
SNG_LIBDIR="$SNG_DIR/usr/lib/syslog-ng"

# Wrappers so that callers need no LD_LIBRARY_PATH: the private libsyslog-ng*.so lives beside the binary.
mkdir -p "$PEERS_DIR/bin"
for tool in syslog-ng loggen; do
    real="$SNG_DIR/usr/sbin/$tool"
    [ -x "$real" ] || real="$SNG_DIR/usr/bin/$tool"
    cat >"$PEERS_DIR/bin/$tool" <<EOF
#!/bin/sh
# Generated by scripts/install-peers.sh: runs the privately extracted $tool with its own libraries.
LD_LIBRARY_PATH="$SNG_LIBDIR\${LD_LIBRARY_PATH:+:\$LD_LIBRARY_PATH}"
export LD_LIBRARY_PATH
# loggen finds its plugins and syslog-ng its modules and SCL relative to this prefix.
SYSLOGNG_PREFIX="$SNG_DIR/usr"
export SYSLOGNG_PREFIX
exec "$real" "\$@"
EOF
    chmod +x "$PEERS_DIR/bin/$tool"
done
# --- HTTP experiments ------------------------------------------------------------------------------
# fingerprint TEXT FILE...: one hash over a toolchain's version and the given files.
fingerprint() {
    { echo "$1"; shift; cat "$@"; } | sha256sum | cut -d' ' -f1
}
# up_to_date STAMP WANT: whether STAMP holds WANT.
up_to_date() {
    [ -f "$1" ] && [ "$(cat "$1")" = "$2" ]
}

# Node.js: the machine's node (Node 20 on this project's machines), else Debian's nodejs (18), which
# runs node_echo.js as well.
command -v node >/dev/null 2>&1 || apt_install nodejs
NODE_BIN="$(command -v node)"

# Python: one venv for Tornado and the two Python clients, from the machine's python3 (pyenv 3.11
# here); Debian's own python3 needs python3-venv for `-m venv`.
HTTP_VENV="$PEERS_DIR/http-venv"
want="$(fingerprint "$(python3 --version 2>&1)" "$HTTP_PEERS/requirements.txt")"
if ! up_to_date "$HTTP_VENV/.installed" "$want" || ! "$HTTP_VENV/bin/python" -c 'import tornado' 2>/dev/null; then
    echo "install-peers.sh: installing tornado, requests, urllib3 into $HTTP_VENV" >&2
    # A fresh venv, so that a package dropped from requirements.txt does not linger.
    rm -rf "$HTTP_VENV"
    if ! python3 -m venv "$HTTP_VENV" </dev/null; then
        rm -rf "$HTTP_VENV"
        apt_install python3-venv
        python3 -m venv "$HTTP_VENV" </dev/null
    fi
    "$HTTP_VENV/bin/pip" install --disable-pip-version-check --no-input --quiet \
        -r "$HTTP_PEERS/requirements.txt" </dev/null
    echo "$want" >"$HTTP_VENV/.installed"
fi

# Finagle: Maven only resolves the jars (copy-dependencies into lib/), javac compiles the one source
# file into classes/, and a wrapper runs it. Built in a staging folder and moved into place whole, so
# that an interrupted build never leaves a half-filled $PEERS_DIR/finagle. Failures only warn.
FINAGLE_DIR="$PEERS_DIR/finagle"
FINAGLE_SRC="$HTTP_PEERS/echo/finagle"
FINAGLE_WRAPPER="$PEERS_DIR/bin/finagle-echo"
finagle_warn() {
    echo "install-peers.sh: WARNING: Finagle echo server not built: $*" >&2
    echo "install-peers.sh: WARNING: the lab will report the finagle peer as unsupported" >&2
    # No stale build either: the wrapper exists exactly when the current sources are built.
    rm -rf "$FINAGLE_DIR" "$FINAGLE_DIR.new"
    rm -f "$FINAGLE_WRAPPER"
}
build_finagle() {
    local stage="$FINAGLE_DIR.new"
    rm -rf "$stage"
    mkdir -p "$stage"
    # copy-dependencies writes nothing into the source folder (no target/). Ten minutes at most: a
    # registry that hangs must not hold up the rest of the installation. Maven's output is shown only
    # on failure (even with -q, Maven 3.8 prints bare colour codes).
    local log="$stage/mvn.log"
    if ! timeout 600 mvn -q -B -f "$FINAGLE_SRC/pom.xml" dependency:copy-dependencies \
        -DincludeScope=runtime -DoutputDirectory="$stage/lib" </dev/null >"$log" 2>&1; then
        cat "$log" >&2
        finagle_warn "Maven could not resolve com.twitter:finagle-http_2.13:24.2.0 (see its output above)"
        return 0
    fi
    rm -f "$log"
    if ! javac --release 17 -encoding UTF-8 -d "$stage/classes" -cp "$stage/lib/*" \
        "$FINAGLE_SRC/src/main/java/loghaul/peers/FinagleEcho.java" </dev/null >&2; then
        finagle_warn "javac failed on FinagleEcho.java"
        return 0
    fi
    echo "$1" >"$stage/.installed"
    rm -rf "$FINAGLE_DIR"
    mv "$stage" "$FINAGLE_DIR"
}
if ! command -v java >/dev/null 2>&1 || ! command -v javac >/dev/null 2>&1 || ! command -v mvn >/dev/null 2>&1; then
    finagle_warn "it needs java, javac (a JDK 17) and mvn"
else
    want="$(fingerprint "$(javac -version 2>&1)" "$FINAGLE_SRC/pom.xml" \
        "$FINAGLE_SRC/src/main/java/loghaul/peers/FinagleEcho.java")"
    if ! up_to_date "$FINAGLE_DIR/.installed" "$want"; then
        echo "install-peers.sh: building the Finagle echo server into $FINAGLE_DIR" >&2
        build_finagle "$want"
    fi
fi
if [ -f "$FINAGLE_DIR/.installed" ]; then
    mkdir -p "$PEERS_DIR/bin"
    # JVM flags for a 2-core, 24GB machine: a 1GB heap cap (the default, a quarter of the memory,
    # lets heap and RSS grow far past what the other peers use), the throughput collector (less GC
    # work than G1 for a small, allocation-heavy server on 2 cores), IPv4 sockets (it listens on
    # 127.0.0.1 only). LOGHAUL_FINAGLE_JAVA_OPTS, when set, replaces them.
    cat >"$FINAGLE_WRAPPER" <<EOF
#!/bin/sh
# Generated by scripts/install-peers.sh: runs the Finagle echo server (bench/peers/http/echo/finagle)
# built into $FINAGLE_DIR. Usage: finagle-echo PORT
exec $(command -v java) \${LOGHAUL_FINAGLE_JAVA_OPTS:--Xms256m -Xmx1g -XX:+UseParallelGC -XX:+ExitOnOutOfMemoryError -Djava.net.preferIPv4Stack=true} \\
    -cp '$FINAGLE_DIR/lib/*:$FINAGLE_DIR/classes' loghaul.peers.FinagleEcho "\$@"
EOF
    chmod +x "$FINAGLE_WRAPPER"
fi

# The Kafka broker (Maven Central) and kcat, for the kafka tests and the kafka_pipeline scenario.
"$ROOT/scripts/install-kafka.sh"

# --- OpenTelemetry Collector -----------------------------------------------------------------------
# otelcol-loghaul: a custom Collector distribution (bench/peers/otelcol: main.go, go.mod and the
# committed go.sum) built with `go build` from the Collector's Go modules. It needs the machine's Go
# (1.26 here; Debian's golang-go is too old), at least the `go` line of go.mod: no other toolchain is
# fetched (GOTOOLCHAIN=local). The module cache and the build cache live in $PEERS_DIR/go, so that a
# rebuild after a change of main.go downloads nothing and compiles only what changed; -mod=readonly
# builds exactly the versions in go.mod and go.sum. The first build downloads about 140MB of modules
# (385MB unpacked, plus 700MB of build cache) and takes 3 minutes on an idle 2-core machine, up to 11 on
# a busy one. Built in a staging folder and moved into place whole. A failure stops the script: the
# tests need the Collector.
OTELCOL_SRC="$ROOT/bench/peers/otelcol"
OTELCOL_DIR="$PEERS_DIR/otelcol"
OTELCOL_BIN="$OTELCOL_DIR/otelcol-loghaul"
GO_DIR="$PEERS_DIR/go"
# CGO_ENABLED=0: a static binary that needs no C compiler to build (as the Collector's own releases).
OTELCOL_GO_ENV=(GOPATH="$GO_DIR" GOMODCACHE="$GO_DIR/pkg/mod" GOCACHE="$GO_DIR/cache"
    GOTOOLCHAIN=local GOWORK=off GOFLAGS="-mod=readonly -buildvcs=false" CGO_ENABLED=0)
otelcol_fail() {
    echo "install-peers.sh: ERROR: the OpenTelemetry Collector (otelcol-loghaul) is not built: $*" >&2
    rm -rf "$OTELCOL_DIR.new"
    exit 1
}
build_otelcol() {
    local stage="$OTELCOL_DIR.new"
    rm -rf "$stage"
    mkdir -p "$stage" "$GO_DIR"
    # Thirty minutes at most (a cold build takes 3 to 11): a proxy that hangs must not hold up the
    # installation for ever. The output is shown only on failure.
    local log="$stage/build.log" rc=0
    timeout 1800 env "${OTELCOL_GO_ENV[@]}" go -C "$OTELCOL_SRC" build -trimpath \
        -o "$stage/otelcol-loghaul" . </dev/null >"$log" 2>&1 || rc=$?
    if [ "$rc" -ne 0 ]; then
        tail -n 60 "$log" >&2
        # No stale build either: after a failed rebuild the binary of older sources is removed.
        rm -rf "$OTELCOL_DIR"
        if [ "$rc" -eq 124 ]; then
            otelcol_fail "go build did not finish within 30 minutes"
        fi
        otelcol_fail "go build failed in $OTELCOL_SRC (exit $rc, see its output above; a go.sum that" \
            "misses an entry is fixed there with \`go mod tidy -e\` and committed)"
    fi
    rm -f "$log"
    echo "$1" >"$stage/.installed"
    rm -rf "$OTELCOL_DIR"
    mv "$stage" "$OTELCOL_DIR"
}
otelcol_go_need="$(sed -n 's/^go \([0-9][0-9.]*\).*/\1/p' "$OTELCOL_SRC/go.mod")"
if ! command -v go >/dev/null 2>&1; then
    otelcol_fail "it needs Go $otelcol_go_need or newer (the machine's Go; Debian's golang-go is too" \
        "old), and there is no \`go\` on PATH"
fi
otelcol_go_have="$(env "${OTELCOL_GO_ENV[@]}" go env GOVERSION </dev/null)"
otelcol_go_have="${otelcol_go_have#go}"
otelcol_go_have="${otelcol_go_have%% *}"
if [ "$(printf '%s\n%s\n' "$otelcol_go_need" "$otelcol_go_have" | sort -V | head -n1)" != "$otelcol_go_need" ]; then
    otelcol_fail "bench/peers/otelcol/go.mod needs Go $otelcol_go_need or newer, and $(command -v go)" \
        "is Go $otelcol_go_have"
fi
want="$(fingerprint "$(env "${OTELCOL_GO_ENV[@]}" go version </dev/null)" "$OTELCOL_SRC/go.mod" \
    "$OTELCOL_SRC/go.sum" "$OTELCOL_SRC/main.go")"
if ! up_to_date "$OTELCOL_DIR/.installed" "$want" || [ ! -x "$OTELCOL_BIN" ]; then
    echo "install-peers.sh: building the OpenTelemetry Collector into $OTELCOL_DIR (go $otelcol_go_have;" \
        "3 to 11 minutes the first time)" >&2
    build_otelcol "$want"
fi

cat >"$PEERS_DIR/env.sh" <<EOF
# Source this file to point \`loghaul bench\` and the tests at the peers (generated by install-peers.sh).
export LOGHAUL_RSYSLOGD=$(command -v rsyslogd || echo /usr/sbin/rsyslogd)
export LOGHAUL_SYSLOG_NG=$PEERS_DIR/bin/syslog-ng
export LOGHAUL_SYSLOG_NG_MODULES=$SNG_MODULES
export LOGHAUL_LOGGEN=$PEERS_DIR/bin/loggen
export LOGHAUL_RUBY=$(command -v ruby || echo /usr/bin/ruby)
export LOGHAUL_NODE=$NODE_BIN
export LOGHAUL_HTTP_PYTHON=$HTTP_VENV/bin/python
export LOGHAUL_AB=$(command -v ab)
export LOGHAUL_WRK=$(command -v wrk)
export LOGHAUL_CURL=$(command -v curl)
export LOGHAUL_KAFKA_LIB=$PEERS_DIR/kafka/lib
export LOGHAUL_OTELCOL=$OTELCOL_BIN
EOF
# Only a built Finagle peer is announced; without the variable the lab reports it as unsupported.
if [ -x "$FINAGLE_WRAPPER" ]; then
    echo "export LOGHAUL_FINAGLE_ECHO=$FINAGLE_WRAPPER" >>"$PEERS_DIR/env.sh"
fi

# Smoke checks: each binary must at least report its version.
/usr/sbin/rsyslogd -v >/dev/null
"$PEERS_DIR/bin/syslog-ng" --module-path="$SNG_MODULES" --version >/dev/null
ruby -reventmachine -e 'exit 0'
command -v logger >/dev/null
"$NODE_BIN" -e 'require("http")'
ruby -rcurb -rem-http -e 'exit 0'
http_py_versions="$("$HTTP_VENV/bin/python" -c 'import tornado, requests, urllib3
print(f"tornado {tornado.version}, requests {requests.__version__}, urllib3 {urllib3.__version__}")')"
ab -V >/dev/null
# wrk has no version option of its own: it prints the version above its usage text, status 1.
{ wrk --version 2>&1 || true; } | grep -q '^wrk '
curl --version >/dev/null
# The Collector must start and list its components (the factories are created, nothing listens).
"$OTELCOL_BIN" --version >/dev/null </dev/null
"$OTELCOL_BIN" components >/dev/null </dev/null
if [ -x "$FINAGLE_WRAPPER" ]; then
    # Without a port the program prints its usage and exits 2: the JVM, the classpath and the class
    # are there.
    rc=0
    "$FINAGLE_WRAPPER" >/dev/null 2>&1 </dev/null || rc=$?
    if [ "$rc" -ne 2 ]; then
        echo "install-peers.sh: $FINAGLE_WRAPPER does not start (exit $rc)" >&2
        exit 1
    fi
fi

echo "rsyslogd:          $(command -v rsyslogd || echo /usr/sbin/rsyslogd) ($(/usr/sbin/rsyslogd -v | head -n1))"
echo "syslog-ng:         $PEERS_DIR/bin/syslog-ng ($("$PEERS_DIR/bin/syslog-ng" --module-path="$SNG_MODULES" --version | head -n1))"
echo "syslog-ng modules: $SNG_MODULES"
echo "loggen:            $PEERS_DIR/bin/loggen"
echo "logger:            $(command -v logger)"
echo "ruby:              $(command -v ruby) ($(ruby -e 'print RUBY_VERSION'), eventmachine ok)"
echo "node:              $NODE_BIN ($("$NODE_BIN" --version))"
echo "http venv python:  $HTTP_VENV/bin/python ($http_py_versions)"
if [ -x "$FINAGLE_WRAPPER" ]; then
    echo "finagle-echo:      $FINAGLE_WRAPPER (finagle-http_2.13 24.2.0, $(java -version 2>&1 | head -n1))"
else
    echo "finagle-echo:      not built (see the warning above)"
fi
echo "ab:                $(command -v ab) ($(ab -V | head -n1))"
echo "wrk:               $(command -v wrk) ($(wrk --version 2>&1 | head -n1 | cut -d' ' -f1-2))"
echo "curl:              $(command -v curl) ($(curl --version | head -n1 | cut -d' ' -f1-2))"
otelcol_core="$(awk '$1 == "go.opentelemetry.io/collector/otelcol" { print $2 }' "$OTELCOL_SRC/go.mod")"
otelcol_contrib="$(awk '$1 ~ /opentelemetry-collector-contrib\/receiver\/syslogreceiver$/ { print $2 }' "$OTELCOL_SRC/go.mod")"
echo "otelcol-loghaul:   $OTELCOL_BIN ($("$OTELCOL_BIN" --version </dev/null); collector $otelcol_core, contrib $otelcol_contrib)"
echo "ruby http clients: Net::HTTP, curb $(ruby -rcurb -e 'print Curl::CURB_VERSION'), em-http-request $(ruby -rem-http/version -e 'print EventMachine::HttpRequest::VERSION')"
echo "env file:          $PEERS_DIR/env.sh"
