#!/usr/bin/env bash
# Two loghaul builds, A and B, in one interleaved experiment: `loghaul bench run SCENARIO` with
# each build in turn (A B A B ..., the order swapped every round so neither always goes first),
# ROUNDS rounds of RUNS runs each after a warm-up, then each build's median rate and CPU per
# million events, and B's median rate as a share of A's. The bench harness itself is B's, or
# AB_HARNESS's (when B is a wrapper that sets something for the server only).
#
#   bench/ab.sh A_BIN B_BIN SCENARIO [ROUNDS] [RUNS] [-- extra `bench run` options]
#
# Example: bench/ab.sh /tmp/loghaul-old target/release/loghaul syslog 5 3
set -euo pipefail
a="$(realpath "$1")" b="$(realpath "$2")" scenario="$3" rounds="${4:-5}" runs="${5:-3}"
shift $(($# < 5 ? $# : 5))
[ "${1:-}" = "--" ] && shift
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
for round in $(seq "$rounds"); do
    order=(a b)
    [ $((round % 2)) -eq 0 ] && order=(b a)
    for which in "${order[@]}"; do
        bin="$a"
        [ "$which" = b ] && bin="$b"
        "${AB_HARNESS:-$b}" bench run "$scenario" --subjects loghaul --runs "$runs" --warmup 1 \
            --loghaul-bin "$bin" --out "$work/out-$which-$round" "$@" 2>&1 |
            grep -E "^\[[0-9]+/[0-9]+\] $scenario loghaul run" | grep -v -e warmup -e failed |
            sed -E 's/.* = ([0-9.]+)(M|k)\/s, CPU [0-9.]+s \(([0-9.]+) s\/1M.*/\1 \2 \3/' |
            awk -v w="$which" '{ r = ($2 == "M") ? $1 * 1e6 : $1 * 1e3; print w, r, $3 }' >>"$work/runs"
    done
done
awk -v scenario="$scenario" '
    { rate[$1] = rate[$1] " " $2; cpu[$1] = cpu[$1] " " $3; n[$1]++ }
    function median(list,   v, k, i, j, t) {
        k = split(list, v, " ")
        for (i = 1; i <= k; i++) for (j = i + 1; j <= k; j++) if (v[j] < v[i]) { t = v[i]; v[i] = v[j]; v[j] = t }
        return (k % 2) ? v[(k + 1) / 2] : (v[k / 2] + v[k / 2 + 1]) / 2
    }
    END {
        ra = median(rate["a"]); rb = median(rate["b"])
        if (n["a"] == 0 || n["b"] == 0 || ra == 0 || rb == 0) { print scenario ": a build had no successful run" > "/dev/stderr"; exit 1 }
        printf "%s: A %.2fM/s %.3f CPU-s/1M (%d runs); B %.2fM/s %.3f CPU-s/1M (%d runs); B/A rate %.3f\n",
            scenario, ra / 1e6, median(cpu["a"]), n["a"], rb / 1e6, median(cpu["b"]), n["b"], rb / ra
    }' "$work/runs"
