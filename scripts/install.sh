#!/usr/bin/env bash
# Installs what loghaul needs to build on a fresh Debian machine, builds the release binary and puts
# it on the PATH as /usr/local/bin/loghaul (without its debug info).
# Usage: scripts/install.sh            (then: loghaul run)
#        scripts/install.sh --deps-only  the toolchain and build dependencies, no build
#                                        (scripts/test.sh builds in its own profile)
# Idempotent and non-interactive (safe under CI=true with no stdin).
set -euo pipefail
cd "$(dirname "$0")/.."

as_root() { if [ "$(id -u)" -eq 0 ]; then "$@"; else sudo "$@"; fi; }

need_apt=()
command -v cc >/dev/null 2>&1 || need_apt+=(build-essential)
command -v pkg-config >/dev/null 2>&1 || need_apt+=(pkg-config)
command -v curl >/dev/null 2>&1 || need_apt+=(curl ca-certificates)
# librdkafka (bundled, built from source) links OpenSSL for Kafka's TLS and SASL.
[ -f /usr/include/openssl/ssl.h ] || need_apt+=(libssl-dev)
if [ ${#need_apt[@]} -gt 0 ]; then
  as_root apt-get update -qq
  DEBIAN_FRONTEND=noninteractive as_root apt-get install -y -qq "${need_apt[@]}" </dev/null
fi

# Debian 12's rustc is too old for this workspace (edition 2024): use rustup's toolchain.
if ! command -v cargo >/dev/null 2>&1; then
  if [ -x "$HOME/.cargo/bin/cargo" ]; then
    export PATH="$HOME/.cargo/bin:$PATH"
  else
    echo "install.sh: installing Rust with rustup (https://rustup.rs)" >&2
    curl --proto '=https' --tlsv1.2 -sSf https://sh.rustup.rs | sh -s -- -y --profile minimal
    export PATH="$HOME/.cargo/bin:$PATH"
  fi
fi

[ "${1:-}" = "--deps-only" ] && exit 0

cargo build --release --locked --bin loghaul
# The release profile keeps line tables for profiling (target/release/loghaul); the installed copy
# leaves them out.
tmp="$(mktemp)"
objcopy --strip-debug --strip-unneeded target/release/loghaul "$tmp"
as_root install -m 0755 "$tmp" /usr/local/bin/loghaul
rm -f "$tmp"
echo "install.sh: installed /usr/local/bin/loghaul ($(/usr/local/bin/loghaul --version))"
