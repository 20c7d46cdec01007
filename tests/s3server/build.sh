#!/usr/bin/env bash
# Build the S3-compatible server the tests run against, once: versitygw (its posix backend keeps
# buckets as folders under a data directory), from the committed wrapper module beside this script
# (go.mod pins the release, go.sum its dependencies; a wrapper, as tests/e2e/cluster does, so the
# build is reproducible and `go install`'s refusal of modules with replaces can never bite).
#
# The binary goes to ${CRAWLFLEET_S3_CACHE:-~/.cache/crawlfleet/s3}/<version>/bin, outside the
# repository, so every clone on a machine shares one build. Idempotent: the binary carries a stamp
# of the module files and flags it was built from; when it matches, this exits at once. A cold
# build takes a few minutes (measured in docs/development.md); it runs under `nice` and logs to
# <version>/build.log.
#
# Usage: build.sh             build when missing or stale
#        build.sh --bin-dir   print the binary directory and exit (tests/support/s3.py uses it)
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"

version="$(sed -n 's#^[[:space:]]*\(require \)\{0,1\}github.com/versity/versitygw \(v[^ ]*\).*#\2#p' \
  "$here/go.mod")"
if [ -z "$version" ]; then
  echo "build.sh: no github.com/versity/versitygw version in $here/go.mod" >&2
  exit 1
fi
root="${CRAWLFLEET_S3_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/crawlfleet/s3}/versitygw-$version"
bin="$root/bin"
if [ "${1:-}" = "--bin-dir" ]; then
  echo "$bin"
  exit 0
fi

# As upstream's Makefile does, so `versitygw --version` names the release it is.
ldflags="-s -w -X main.Version=$version -X main.Build=module-proxy"
stamp() {
  cat "$here/go.mod" "$here/go.sum" | sha256sum | cut -d' ' -f1
  echo "$ldflags"
}
fresh() {
  [ -x "$bin/versitygw" ] && [ -f "$bin/.versitygw.stamp" ] \
    && [ "$(cat "$bin/.versitygw.stamp")" = "$(stamp)" ]
}

# shellcheck source=../support/gobuild.sh
. "$here/../support/gobuild.sh"
go_build_begin "$root" "the test S3 server (Go >= 1.25)" fresh
log="$root/build.log"
started=$(date +%s)
echo "== $(date -u +%FT%TZ) build.sh versitygw $version" >>"$log"
echo "build.sh: building versitygw $version -- a cold build takes minutes; log: $log" >&2
# Into a temporary dir, then moved into place: an interrupted build never leaves a truncated
# binary that looks fresh.
tmp="$(mktemp -d "$root/tmp.XXXXXX")"
if ! (cd "$here" && nice -n 10 go build -trimpath -ldflags="$ldflags" -o "$tmp/versitygw" \
  github.com/versity/versitygw/cmd/versitygw) >>"$log" 2>&1; then
  rm -rf "$tmp"
  echo "build.sh: building versitygw failed; the end of $log:" >&2
  tail -n 30 "$log" >&2
  exit 1
fi
mv -f "$tmp/versitygw" "$bin/versitygw"
rm -rf "$tmp"
stamp >"$bin/.versitygw.stamp"
echo "build.sh: versitygw $version built in $(($(date +%s) - started)) s into $bin" | tee -a "$log" >&2
