#!/usr/bin/env bash
# Runs every test loghaul has: formatting, lints, unit/property/integration tests with real peers
# (rsyslog, util-linux logger, syslog-ng's loggen), the small-size benchmark scenarios, and every
# fuzz target for 30 seconds from its committed corpus. Installs what the tests need from Debian
# first. `.ci/run` calls exactly this.
set -euo pipefail
cd "$(dirname "$0")/.."
export CARGO_TERM_COLOR=${CARGO_TERM_COLOR:-never}

# Each step says how long the run has taken so far (docs/testing.md reads the breakdown off it).
step() { printf '\n==> [%dm%02ds] %s\n' $((SECONDS / 60)) $((SECONDS % 60)) "$*"; }

step "toolchain and build dependencies"
./scripts/install.sh
export PATH="$HOME/.cargo/bin:$PATH"

step "peers and clients for the tests (rsyslog, logger, syslog-ng, ruby-eventmachine)"
./scripts/install-peers.sh

step "forward-protocol clients for the tests (PyPI fluent-logger, npm @fluent-org/logger, fluent-logger-golang)"
./scripts/install-clients.sh

# The lab's peers (install-peers.sh writes where it put them).
if [ -f "${LOGHAUL_PEERS_DIR:-/opt/loghaul-peers}/env.sh" ]; then
    # shellcheck disable=SC1091
    . "${LOGHAUL_PEERS_DIR:-/opt/loghaul-peers}/env.sh"
fi

# 2,000-connection tests need more descriptors than the usual 1024 soft limit.
ulimit -n 65536 2>/dev/null || ulimit -n "$(ulimit -Hn)"

step "cargo fmt --check"
cargo fmt --all -- --check

step "cargo clippy -D warnings"
# In the release profile: the C libraries that build scripts compile (librdkafka, jemalloc, zstd)
# are then built once for clippy and the tests, not a second time for the dev profile.
cargo clippy --release --workspace --all-targets --locked -- -D warnings

step "cargo test (release: the integration and bench tests drive the real binary under load)"
export LOGHAUL_BIN="$PWD/target/release/loghaul"
cargo test --workspace --release --locked

step "fuzz targets: build, then 30 s each from the committed corpus (which the runs leave as is)"
./scripts/fuzz.sh run 30

echo
echo "test.sh: all checks passed in $((SECONDS / 60))m$((SECONDS % 60))s"
