#!/usr/bin/env bash
# Builds (and optionally runs) the cargo-fuzz targets under fuzz/.
# Usage: scripts/fuzz.sh build | run [SECONDS] [TARGET...]
#
# `run` runs every target (or the ones named) for SECONDS each, starting from its committed corpus
# (fuzz/corpus/TARGET). libFuzzer writes the inputs it finds into the first corpus directory it is
# given, so that is a scratch directory and the committed corpus comes second, read only: a run
# never changes the checkout. FUZZ_WORK=DIR keeps the scratch directories (DIR/TARGET) for a later
# `cargo fuzz cmin`; by default they are removed. -rss_limit_mb and -timeout turn an unbounded
# allocation or a hang (10 s for one input) into a failed run, like a crash; its input is left in
# fuzz/artifacts/TARGET/.
set -euo pipefail
cd "$(dirname "$0")/.."
export PATH="$HOME/.cargo/bin:$PATH"
mode=${1:-build}
secs=${2:-30}
shift $(($# > 2 ? 2 : $#))

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
[ "$mode" = run ] || exit 0

if [ $# -gt 0 ]; then
  targets=("$@")
else
  mapfile -t targets < <("${fuzz[@]}" list)
fi
if [ -n "${FUZZ_WORK:-}" ]; then
  work=$(realpath -m "$FUZZ_WORK")
  mkdir -p "$work"
else
  work=$(mktemp -d)
fi
# Targets run side by side, one per core (FUZZ_JOBS overrides): each still gets SECONDS of a core,
# so a run covers what a serial one does in a fraction of the time. A target's output goes to
# its own log, printed when the target ends, so the lines of two runs never interleave.
jobs=${FUZZ_JOBS:-$(nproc)}
logs=$(mktemp -d)
trap 'rm -rf "$logs"; [ -n "${FUZZ_WORK:-}" ] || rm -rf "$work"' EXIT
running=()
failed=()
finish() { # PID TARGET: wait for one run, print its log, note a failure
  if wait "$1"; then
    echo "==> fuzz $2: passed"
  else
    failed+=("$2")
    cat "$logs/$2"
    echo "==> fuzz $2: FAILED (input in fuzz/artifacts/$2/)"
  fi
}
declare -A names
for target in "${targets[@]}"; do
  mkdir -p "$work/$target"
  corpus=()
  if [ -d "fuzz/corpus/$target" ]; then
    corpus=("$PWD/fuzz/corpus/$target")
  fi
  echo "==> fuzz $target for ${secs}s"
  "${fuzz[@]}" run -O "$target" "$work/$target" "${corpus[@]}" -- \
    -max_total_time="$secs" -rss_limit_mb=2048 -timeout=10 >"$logs/$target" 2>&1 &
  running+=($!)
  names[$!]=$target
  if [ ${#running[@]} -ge "$jobs" ]; then
    finish "${running[0]}" "${names[${running[0]}]}"
    running=("${running[@]:1}")
  fi
done
for pid in "${running[@]}"; do
  finish "$pid" "${names[$pid]}"
done
if [ ${#failed[@]} -gt 0 ]; then
  echo "fuzz.sh: failed: ${failed[*]}" >&2
  exit 1
fi
