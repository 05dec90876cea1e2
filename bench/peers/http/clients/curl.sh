#!/usr/bin/env bash
# HTTP client for the client experiment on the curl command-line tool (libcurl).
#
#   bench/peers/http/clients/curl.sh download URL OUTFILE
#   bench/peers/http/clients/curl.sh upload URL LISTFILE
#
# download: `curl -sS --fail -o OUTFILE URL` over HTTP/1.1; exit 0 iff status 200 and the whole
#   body was written (curl fails a body shorter than its Content-Length).
# upload: one curl process for all files: a config file (-K) with one url/data-binary/next group
#   per file, so libcurl reuses its one keep-alive connection for every POST, output to /dev/null.
#   Each transfer's status is written to a pipe and checked: the first non-2xx answer or error
#   stops the run with a message on stderr naming the file. Prints nothing else.
#
# `data-binary = @FILE` makes curl read each file whole into memory (the only way curl POSTs a file
# as is; -T would stream it, but with PUT semantics), and curl reads them all while it parses the
# config, before the first transfer: its RSS is about the sum of the files (210MB for 1000 x 200KB).
# A file that cannot be read is refused before curl starts: curl would only warn and POST nothing.
#
# LOGHAUL_CURL overrides the curl binary.
set -euo pipefail

prog=curl.sh
curl=${LOGHAUL_CURL:-curl}

die() {
    echo "$prog: $*" >&2
    exit 1
}

if [ "$#" -ne 3 ] || { [ "$1" != download ] && [ "$1" != upload ]; }; then
    echo "usage: $prog download URL OUTFILE | upload URL LISTFILE" >&2
    exit 2
fi
mode=$1 url=$2 path=$3

if [ "$mode" = download ]; then
    rc=0
    code=$("$curl" -sS --http1.1 --fail -o "$path" -w '%{http_code}' "$url") || rc=$?
    [ "$rc" -eq 0 ] || die "download of $url failed: HTTP $code (curl exit $rc)"
    # --fail only fails at 400 and above; the contract is 200 exactly.
    [ "$code" = 200 ] || die "download of $url failed: HTTP $code"
    exit 0
fi

# quote VAR S: sets VAR to S as a double-quoted curl config value (backslash and double quote
# escaped). It assigns instead of printing so that the loop below forks nothing per file: three
# command substitutions per file cost about 3ms, a second for 1000 batch files.
quote() {
    local s=${2//\\/\\\\}
    s=${s//\"/\\\"}
    printf -v "$1" '"%s"' "$s"
}

cfg=$(mktemp "${TMPDIR:-/tmp}/loghaul-curl.XXXXXX")
trap 'rm -f "$cfg"' EXIT
quote q_url "$url"
count=0
{
    while IFS= read -r file || [ -n "$file" ]; do
        file=${file%$'\r'}
        [ -n "$file" ] || continue
        [ -f "$file" ] && [ -r "$file" ] || die "upload of $file failed: cannot read the file"
        [ "$count" -eq 0 ] || echo 'next'
        quote q_file "@$file"
        # One status line per transfer: code, curl's exit code, its error text, the file (last, as
        # it may hold anything; % is doubled for the write-out format).
        quote q_out "%{http_code}	%{exitcode}	%{errormsg}	${file//%/%%}\\n"
        # Per-transfer options: `next` resets them, so every group repeats them.
        echo "url = $q_url"
        echo "data-binary = $q_file"
        echo 'header = "Content-Type: application/x-ndjson"'
        # curl 7.88 sends "Expect: 100-continue" for bodies over 1MB and waits for the server's 100;
        # the other clients send the body at once, so this one does too.
        echo 'header = "Expect:"'
        echo 'http1.1'
        echo 'fail'
        echo 'output = "/dev/null"'
        echo "write-out = $q_out"
        count=$((count + 1))
    done <"$path"
} >"$cfg"
[ "$count" -gt 0 ] || exit 0

# -s: curl's own messages are replaced by the checker's; --fail-early: stop at the first failed
# transfer instead of going on with the rest of the config.
set +e
"$curl" -s --fail-early -K "$cfg" | awk -F '\t' -v prog="$prog" -v want="$count" '
    {
        file = $0
        sub(/^[^\t]*\t[^\t]*\t[^\t]*\t/, "", file)
        if ($2 != 0) {
            printf "%s: upload of %s failed: HTTP %s, curl exit %s: %s\n", prog, file, $1, $2, $3 > "/dev/stderr"
            bad = 1
            exit 1
        }
        if ($1 !~ /^2[0-9][0-9]$/) {
            printf "%s: upload of %s failed: HTTP %s\n", prog, file, $1 > "/dev/stderr"
            bad = 1
            exit 1
        }
        done++
    }
    END {
        # Reached after an exit above too (its status stands); otherwise every file needs its line.
        if (!bad && done != want) {
            printf "%s: upload stopped after %d of %d files\n", prog, done, want > "/dev/stderr"
            exit 1
        }
    }'
status=("${PIPESTATUS[@]}")
set -e
# The checker decides; a curl that failed without a status line (or was stopped by the checker's
# exit) leaves the checker with fewer lines than files, which it reports.
[ "${status[1]}" -eq 0 ] || exit 1
[ "${status[0]}" -eq 0 ] || die "curl exited with ${status[0]}"
