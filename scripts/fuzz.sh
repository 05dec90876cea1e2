#!/usr/bin/env bash
# Builds (and optionally runs) the cargo-fuzz targets under fuzz/.
# Usage: scripts/fuzz.sh build | run [SECONDS]
set -euo pipefail
cd "$(dirname "$0")/.."
export PATH="$HOME/.cargo/bin:$PATH"
mode=${1:-build}
secs=${2:-30}

if ! cargo fuzz --version >/dev/null 2>&1; then
  cargo install cargo-fuzz --locked
fi
# cargo-fuzz needs nightly flags (-Zsanitizer). Use an installed nightly when there is one;
# otherwise let stable accept them (RUSTC_BOOTSTRAP) so CI never depends on a download.
if rustup toolchain list 2>/dev/null | grep -q '^nightly'; then
  fuzz=(cargo +nightly fuzz)
else
  export RUSTC_BOOTSTRAP=1
  fuzz=(cargo fuzz)
fi
"${fuzz[@]}" build -O
if [ "$mode" = run ]; then
  for target in $("${fuzz[@]}" list); do
    "${fuzz[@]}" run -O "$target" -- -max_total_time="$secs"
  done
fi
