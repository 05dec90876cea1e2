#!/usr/bin/env bash
# Runs every test loghaul has: formatting, lints, unit/property/integration tests with real peers
# (rsyslog, util-linux logger, syslog-ng's loggen), the small-size benchmark scenarios, and every
# fuzz target for 30 seconds from its committed corpus. Installs what the tests need from Debian
# first. `.ci/run` calls exactly this.
#
#   scripts/test.sh            everything (what CI runs)
#   scripts/test.sh --quick    format, clippy, the unit tests, and the integration tests of the
#                              subjects the change touches (files changed since main, or since
#                              QUICK_BASE, and not committed yet), on a machine where the full
#                              run installed the peers once
set -euo pipefail
cd "$(dirname "$0")/.."
export CARGO_TERM_COLOR=${CARGO_TERM_COLOR:-never}

# Each step says how long the run has taken so far (docs/testing.md reads the breakdown off it).
step() { printf '\n==> [%dm%02ds] %s\n' $((SECONDS / 60)) $((SECONDS % 60)) "$*"; }

quick=false
[ "${1:-}" = "--quick" ] && quick=true

# The integration-test modules (tests/it/*.rs) that cover a changed path.
it_modules_for() {
    case "$1" in
    tests/it/harness.rs | tests/it/main.rs) echo shutdown validate ;;
    tests/it/*.rs) basename "$1" .rs ;;
    src/sources/syslog/* | crates/loghaul-codec/src/syslog* | crates/loghaul-codec/src/framing*)
        echo logger rsyslog framing formats bad_input ;;
    src/sources/fluent/* | src/sinks/fluent/* | crates/loghaul-codec/src/forward*)
        echo forward_clients forward_wire ;;
    src/sources/file/*) echo file_source file_tree ;;
    src/sinks/file/*) echo file_sink crash ;;
    src/sources/http_server/*) echo http_server ;;
    src/sinks/http/*) echo http_sink ;;
    src/sources/kafka/* | src/sinks/kafka/* | src/kafka.rs) echo kafka ;;
    src/transforms/*) echo transforms unit_tests ;;
    src/unit_test/*) echo unit_tests ;;
    src/net/*) echo listener tls ;;
    src/api* | src/console.html | src/tap* | src/top.rs) echo api tap top web_console ;;
    src/watch.rs | src/systemd.rs) echo reload ;;
    src/metrics.rs | src/main.rs | src/cli.rs) echo operations api ;;
    packaging/* | scripts/package-deb.sh | build.rs) echo package ;;
    src/config/* | crates/loghaul-config/*) echo config validate unit_tests ;;
    src/pipeline/* | src/topology/* | src/server.rs | crates/loghaul-buffer/* | crates/loghaul-core/*)
        echo durability shutdown memory crash reload ;;
    src/sinks/* | src/sources/*) echo formats console ;;
    esac
}

if ! $quick; then
    step "toolchain and build dependencies"
    ./scripts/install.sh --deps-only

    step "peers and clients for the tests (rsyslog, logger, syslog-ng, ruby-eventmachine)"
    ./scripts/install-peers.sh

    step "clients for the tests (PyPI fluent-logger and selenium, npm @fluent-org/logger, fluent-logger-golang)"
    ./scripts/install-clients.sh
fi
export PATH="$HOME/.cargo/bin:$PATH"

# The lab's peers (install-peers.sh writes where it put them).
if [ -f "${LOGHAUL_PEERS_DIR:-/opt/loghaul-peers}/env.sh" ]; then
    # shellcheck disable=SC1091
    . "${LOGHAUL_PEERS_DIR:-/opt/loghaul-peers}/env.sh"
fi

# 2,000-connection tests need more descriptors than the usual 1024 soft limit.
ulimit -n 65536 2>/dev/null || ulimit -n "$(ulimit -Hn)"

step "cargo fmt --check"
cargo fmt --all -- --check

if ! $quick; then
    # The fuzz targets build (their own target dir, sanitizer flags) beside what follows, at the
    # lowest priority: it takes the CPU the other steps leave idle (most of the time the
    # integration tests wait on servers, clients and timers), and yields it whenever they want
    # it. Its output is kept for a failure.
    step "fuzz targets: build in the background (nice 19) while clippy and the tests run"
    fuzz_log=$(mktemp)
    nice -n 19 ./scripts/fuzz.sh build >"$fuzz_log" 2>&1 &
    fuzz_build=$!
    trap 'kill "$fuzz_build" 2>/dev/null || true; rm -f "$fuzz_log"' EXIT
fi

step "cargo clippy -D warnings"
# Clippy and the tests share one profile (`ci`: release without LTO and full debug info, see
# Cargo.toml), so the C libraries that build scripts compile (librdkafka, jemalloc, zstd) are built
# once for both.
cargo clippy --profile ci --workspace --all-targets --locked -- -D warnings
# The build without Kafka and jemalloc (what the config fuzz target links): its warnings too.
cargo clippy --profile ci --lib --locked --no-default-features -- -D warnings

if $quick; then
    step "unit tests"
    cargo test --workspace --profile ci --locked --lib --bins
    base="${QUICK_BASE:-$(git merge-base HEAD main 2>/dev/null || echo HEAD)}"
    modules=$(
        { git diff --name-only "$base"; git diff --name-only HEAD; } | sort -u |
            while read -r path; do it_modules_for "$path"; done | tr ' ' '\n' | sort -u
    )
    if [ -n "$modules" ]; then
        # shellcheck disable=SC2086
        step "integration tests of what changed:" $modules
        filters=()
        for m in $modules; do filters+=("$m::"); done
        cargo test --profile ci --locked --test it -- "${filters[@]}"
    else
        step "no integration tests cover what changed"
    fi
    echo
    echo "test.sh --quick: passed in $((SECONDS / 60))m$((SECONDS % 60))s"
    exit 0
fi

step "cargo test (optimized: the integration and bench tests drive the real binary under load)"
export LOGHAUL_BIN="$PWD/target/ci/loghaul"
cargo test --workspace --profile ci --locked

step "fuzz targets: wait for their build, then 30 s each from the committed corpus (which the runs leave as is)"
if ! wait "$fuzz_build"; then
    cat "$fuzz_log"
    echo "test.sh: the fuzz targets do not build" >&2
    exit 1
fi
./scripts/fuzz.sh run 30

echo
echo "test.sh: all checks passed in $((SECONDS / 60))m$((SECONDS % 60))s"
