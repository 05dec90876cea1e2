#!/usr/bin/env bash
# Builds the Debian package: the release binary (without debug info), /etc/loghaul/loghaul.yaml
# (the embedded default configuration, a conffile), the systemd unit, the man pages and the bash,
# zsh and fish completions, all generated from the binary itself.
#
#   scripts/package-deb.sh                      builds the release binary, writes target/debian/*.deb
#   scripts/package-deb.sh --binary PATH        packages an already built binary instead
#   scripts/package-deb.sh --out DIR            writes the package into DIR
#
# Needs dpkg-deb (Debian's dpkg) and, for the build, what scripts/install.sh installs. Prints the
# package's path on its last line.
set -euo pipefail
cd "$(dirname "$0")/.."
root="$PWD"

binary=""
out="$root/target/debian"
while [ $# -gt 0 ]; do
    case "$1" in
    --binary) binary="$2"; shift 2 ;;
    --out) out="$2"; shift 2 ;;
    *) echo "package-deb.sh: unknown argument $1" >&2; exit 2 ;;
    esac
done
if [ -z "$binary" ]; then
    cargo build --release --locked --bin loghaul >&2
    binary="$root/target/release/loghaul"
fi
[ -x "$binary" ] || { echo "package-deb.sh: no binary at $binary" >&2; exit 1; }

version="$(sed -n 's/^version = "\(.*\)"/\1/p' Cargo.toml | head -n1)"
arch="$(dpkg --print-architecture)"
stage="$(mktemp -d)"
trap 'rm -rf "$stage"' EXIT

install -d "$stage/DEBIAN" "$stage/usr/bin" "$stage/etc/loghaul" "$stage/lib/systemd/system" \
    "$stage/usr/share/man/man1" "$stage/usr/share/doc/loghaul" \
    "$stage/usr/share/bash-completion/completions" "$stage/usr/share/zsh/vendor-completions" \
    "$stage/usr/share/fish/vendor_completions.d"
# The binary users run: optimized, symbols and debug info stripped (the release profile keeps
# line tables for profiles; the package does not need them).
objcopy --strip-debug --strip-unneeded "$binary" "$stage/usr/bin/loghaul"
chmod 0755 "$stage/usr/bin/loghaul"
"$stage/usr/bin/loghaul" config default >"$stage/etc/loghaul/loghaul.yaml"
chmod 0644 "$stage/etc/loghaul/loghaul.yaml"
install -m 0644 packaging/debian/loghaul.service "$stage/lib/systemd/system/loghaul.service"
for script in postinst prerm postrm; do
    install -m 0755 "packaging/debian/$script" "$stage/DEBIAN/$script"
done
man_tmp="$stage/man"
"$stage/usr/bin/loghaul" generate man "$man_tmp"
for page in "$man_tmp"/*.1; do
    gzip -9n <"$page" >"$stage/usr/share/man/man1/$(basename "$page").gz"
done
rm -rf "$man_tmp"
comp="$stage/comp"
"$stage/usr/bin/loghaul" generate completions bash "$comp" >/dev/null
"$stage/usr/bin/loghaul" generate completions zsh "$comp" >/dev/null
"$stage/usr/bin/loghaul" generate completions fish "$comp" >/dev/null
install -m 0644 "$comp/loghaul.bash" "$stage/usr/share/bash-completion/completions/loghaul"
install -m 0644 "$comp/_loghaul" "$stage/usr/share/zsh/vendor-completions/_loghaul"
install -m 0644 "$comp/loghaul.fish" "$stage/usr/share/fish/vendor_completions.d/loghaul.fish"
rm -rf "$comp"
cat >"$stage/usr/share/doc/loghaul/copyright" <<COPYRIGHT
Format: https://www.debian.org/doc/packaging-manuals/copyright-format/1.0/
Upstream-Name: loghaul
License: Apache-2.0

Files: *
License: Apache-2.0
 On Debian systems, the full text of the Apache License 2.0 is in
 /usr/share/common-licenses/Apache-2.0.
COPYRIGHT
gzip -9n <README.md >"$stage/usr/share/doc/loghaul/README.md.gz"

echo "/etc/loghaul/loghaul.yaml" >"$stage/DEBIAN/conffiles"
size="$(du -sk --exclude=DEBIAN "$stage" | cut -f1)"
cat >"$stage/DEBIAN/control" <<CONTROL
Package: loghaul
Version: $version
Architecture: $arch
Maintainer: loghaul developers <loghaul@example.invalid>
Installed-Size: $size
Depends: libc6 (>= 2.36), libssl3, zlib1g
Section: admin
Priority: optional
Homepage: https://example.invalid/loghaul
Description: log ingestion and forwarding server
 loghaul receives logs over syslog (TCP, UDP, TLS), HTTP and the Fluentd forward
 protocol, and from files; it parses, transforms (VRL) and routes them, and
 delivers them to files, Fluentd and Fluent Bit peers, HTTP endpoints and Kafka,
 without losing an accepted event. Its configuration reloads without dropping a
 connection; `loghaul top`, `loghaul tap` and a browser console show what flows.
CONTROL
mkdir -p "$out"
deb="$out/loghaul_${version}_${arch}.deb"
dpkg-deb --root-owner-group --build "$stage" "$deb" >&2
echo "$deb"
