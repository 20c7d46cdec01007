# Shared by the test beds' Go builds (tests/e2e/cluster/build.sh, tests/s3server/build.sh);
# sourced, not run. Each build caches binaries outside the repository under a root of its own.

# go_build_begin ROOT WHAT FRESH: what every cached Go build does before it builds. Exits 0
# when the command FRESH says the binaries are already built; fails naming WHAT when Go is
# missing; otherwise creates ROOT/bin, holds ROOT/.lock for the rest of the script (a second
# clone or a parallel CI step waits, then finds the work done) and sets the Go environment:
# static binaries, modules exactly as go.sum pins them.
go_build_begin() {
  local root="$1" what="$2" fresh="$3"
  if "$fresh"; then
    exit 0
  fi
  PATH="$PATH:/usr/local/go/bin" # where Go's own tarball installs it, often not on PATH
  if ! command -v go >/dev/null 2>&1; then
    echo "build.sh: Go is needed to build $what" >&2
    exit 1
  fi
  mkdir -p "$root/bin"
  exec 9>"$root/.lock"
  flock 9
  if "$fresh"; then
    exit 0
  fi
  export CGO_ENABLED=0 GOFLAGS="-mod=readonly -buildvcs=false"
}
