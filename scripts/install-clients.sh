#!/usr/bin/env bash
# Installs the real Fluentd forward-protocol clients (and the independent forward server) that the
# integration tests drive, each beside its wrapper program under tests/clients/ (see its README.md):
#
#   PyPI fluent-logger, selenium, opentelemetry-sdk + OTLP exporters
#                                 -> tests/clients/python/.venv  (pip, pinned in requirements.txt)
#   npm  @fluent-org/logger       -> tests/clients/node/node_modules  (npm ci, package-lock.json)
#   Go   fluent-logger-golang     -> tests/clients/go/bin/fluent-go-send  (go build, go.sum)
#
# Idempotent and non-interactive (CI=true, no stdin). Each part records a fingerprint of its inputs
# (the toolchain's version and the pinned files) and is redone only when that changes, so a second run
# touches no network and takes well under a second. Any failure stops the script with a non-zero exit.
set -euo pipefail
cd "$(dirname "$0")/.."
root="$PWD"
clients="$root/tests/clients"

die() {
    echo "install-clients.sh: $*" >&2
    exit 1
}
# The machine image provides these toolchains (see the project's machine notes); nothing here can
# install a suitable one (Debian 12's golang is 1.19, older than fluent-logger-golang's go 1.23).
command -v python3 >/dev/null 2>&1 || die "python3 not found (needed for PyPI fluent-logger)"
command -v node >/dev/null 2>&1 || die "node not found (needed for npm @fluent-org/logger)"
command -v npm >/dev/null 2>&1 || die "npm not found (needed for npm @fluent-org/logger)"
command -v go >/dev/null 2>&1 || die "go not found (needed for github.com/fluent/fluent-logger-golang)"
node -e 'process.exit(Number(process.versions.node.split(".")[0]) >= 18 ? 0 : 1)' ||
    die "node $(node --version) is too old: the wrappers need node >= 18 (util.parseArgs)"

# fingerprint TOOLCHAIN_VERSION FILE...: one hash over a toolchain's version and the given files.
fingerprint() {
    { echo "$1"; shift; cat "$@"; } | sha256sum | cut -d' ' -f1
}
# up_to_date STAMP WANT: whether STAMP holds WANT.
up_to_date() {
    [ -f "$1" ] && [ "$(cat "$1")" = "$2" ]
}

# --- Python: fluent-logger in a private venv -------------------------------------------------------
py="$clients/python"
venv="$py/.venv"
want="$(fingerprint "$(python3 --version)" "$py/requirements.txt")"
if ! up_to_date "$venv/.installed" "$want" || [ ! -x "$venv/bin/python" ]; then
    echo "install-clients.sh: installing PyPI fluent-logger into $venv" >&2
    # A fresh venv, so that a package dropped from requirements.txt does not linger.
    rm -rf "$venv"
    python3 -m venv "$venv" || die "python3 -m venv failed (on Debian: apt-get install python3-venv)"
    "$venv/bin/pip" install --disable-pip-version-check --no-input --quiet -r "$py/requirements.txt" </dev/null ||
        die "pip install -r $py/requirements.txt failed"
    echo "$want" >"$venv/.installed"
fi
py_version="$("$venv/bin/python" -c 'from importlib.metadata import version; import fluent.sender; print(version("fluent-logger"))')" ||
    die "fluent-logger does not import from $venv (delete it and run again)"
"$venv/bin/python" -c 'import selenium.webdriver' ||
    die "selenium does not import from $venv (delete it and run again)"
"$venv/bin/python" -c 'import opentelemetry.sdk._logs, opentelemetry.exporter.otlp.proto.http._log_exporter, opentelemetry.exporter.otlp.proto.grpc._log_exporter' ||
    die "the OpenTelemetry SDK's OTLP exporters do not import from $venv (delete it and run again)"

# --- Node: @fluent-org/logger from package-lock.json ------------------------------------------------
nd="$clients/node"
want="$(fingerprint "$(node --version)" "$nd/package.json" "$nd/package-lock.json")"
if ! up_to_date "$nd/node_modules/.installed" "$want"; then
    echo "install-clients.sh: installing npm @fluent-org/logger into $nd/node_modules" >&2
    # npm ci installs exactly the lock file and fails if package.json disagrees with it.
    (cd "$nd" && npm ci --no-audit --no-fund --loglevel=error </dev/null >&2) || die "npm ci in $nd failed"
    echo "$want" >"$nd/node_modules/.installed"
fi
node_version="$(cd "$nd" && node --input-type=module -e '
    import "@fluent-org/logger";
    import {readFileSync} from "node:fs";
    console.log(JSON.parse(readFileSync("node_modules/@fluent-org/logger/package.json", "utf8")).version);
')" || die "@fluent-org/logger does not import from $nd/node_modules (delete it and run again)"

# --- Go: fluent-go-send built against go.sum ---------------------------------------------------------
gd="$clients/go"
bin="$gd/bin/fluent-go-send"
want="$(fingerprint "$(go version)" "$gd/go.mod" "$gd/go.sum" "$gd"/*.go)"
if ! up_to_date "$gd/bin/.installed" "$want" || [ ! -x "$bin" ]; then
    echo "install-clients.sh: building $bin with github.com/fluent/fluent-logger-golang" >&2
    # -mod=readonly: fail instead of editing go.mod/go.sum; -buildvcs=false: no git lookups in a clone.
    (cd "$gd" && go build -mod=readonly -buildvcs=false -trimpath -o bin/fluent-go-send .) </dev/null ||
        die "go build in $gd failed"
    echo "$want" >"$gd/bin/.installed"
fi
go_version="$(go version -m "$bin" | awk '$1 == "dep" && $2 == "github.com/fluent/fluent-logger-golang" { print $3 }')"
[ -n "$go_version" ] || die "$bin does not embed github.com/fluent/fluent-logger-golang"

echo "python sender:  $venv/bin/python $py/send.py  (PyPI fluent-logger $py_version)"
echo "console driver: $venv/bin/python $py/console.py  (PyPI selenium, Debian chromium-driver)"
echo "otlp sender:    $venv/bin/python $py/otlp_send.py  (PyPI opentelemetry-sdk, OTLP exporters)"
echo "node sender:    $(command -v node) $nd/send.mjs  (npm @fluent-org/logger $node_version)"
echo "node receiver:  $(command -v node) $nd/receive.mjs  (npm @fluent-org/logger $node_version, FluentServer)"
echo "go sender:      $bin  (github.com/fluent/fluent-logger-golang $go_version)"
