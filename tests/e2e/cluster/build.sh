#!/usr/bin/env bash
# Build the e2e control plane from source, once: kube-apiserver, kube-controller-manager, kubectl
# (k8s.io/kubernetes), etcd and helm, at the versions pinned in versions.env, from the committed
# wrapper modules beside this script (see update-modules.sh for why they exist); and from the
# same kube module the real node's kubelet and kube-scheduler (node.py), so node and control
# plane are one Kubernetes release.
#
# Binaries go to ${CRAWLFLEET_K8S_CACHE:-~/.cache/crawlfleet/k8s}/<versions>/bin, outside the
# repository, so every clone on a machine shares one build. Idempotent: each tool carries a stamp
# of the module files and flags it was built from; when all stamps match, this exits at once.
# A cold build takes minutes (measured in docs/development.md); it runs under `nice` so it leaves
# the machine usable, and logs to <versions>/build.log.
#
# Usage: build.sh             build what is missing or stale
#        build.sh --bin-dir   print the binary directory and exit (the pytest fixtures use it)
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
# shellcheck source=versions.env
. "$here/versions.env"

key="k8s-${KUBERNETES_VERSION}_etcd-${ETCD_VERSION}_helm-${HELM_VERSION}"
root="${CRAWLFLEET_K8S_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/crawlfleet/k8s}/$key"
bin="$root/bin"
if [ "${1:-}" = "--bin-dir" ]; then
  echo "$bin"
  exit 0
fi

k8s_minor="${KUBERNETES_VERSION#v1.}"
k8s_minor="${k8s_minor%%.*}"
kube_ldflags="-s -w"
for pkg in k8s.io/component-base/version k8s.io/client-go/pkg/version; do
  kube_ldflags+=" -X $pkg.gitVersion=$KUBERNETES_VERSION -X $pkg.gitMajor=1"
  kube_ldflags+=" -X $pkg.gitMinor=$k8s_minor -X $pkg.gitTreeState=clean"
done
etcd_ldflags="-s -w"
# helm reports the Kubernetes version of the client-go it was built with (its Makefile does so).
helm_k8s="$(sed -n 's#^[[:space:]]*k8s.io/client-go v0\.\([0-9]*\)\..*#\1#p' "$here/helm/go.mod")"
helm_ldflags="-s -w -X helm.sh/helm/v3/internal/version.version=$HELM_VERSION"
helm_ldflags+=" -X helm.sh/helm/v3/internal/version.gitTreeState=clean"
for pkg in helm.sh/helm/v3/pkg/lint/rules helm.sh/helm/v3/pkg/chartutil; do
  helm_ldflags+=" -X $pkg.k8sVersionMajor=1 -X $pkg.k8sVersionMinor=$helm_k8s"
done

# stamp MODULE LDFLAGS: what a tool's binaries were built from.
stamp() {
  cat "$here/$1/go.mod" "$here/$1/go.sum" | sha256sum | cut -d' ' -f1
  echo "$2"
}

# fresh MODULE LDFLAGS BINARY...: true when every binary exists and was built from these inputs.
fresh() {
  local module="$1" ldflags="$2"
  shift 2
  for binary in "$@"; do
    [ -x "$bin/$binary" ] || return 1
  done
  [ -f "$bin/.$module.stamp" ] && [ "$(cat "$bin/.$module.stamp")" = "$(stamp "$module" "$ldflags")" ]
}

kube_binaries=(kube-apiserver kube-controller-manager kubectl kube-scheduler kubelet)
all_fresh() {
  fresh kube "$kube_ldflags" "${kube_binaries[@]}" \
    && fresh etcd "$etcd_ldflags" etcd \
    && fresh helm "$helm_ldflags" helm
}

# shellcheck source=../../support/gobuild.sh
. "$here/../../support/gobuild.sh"
go_build_begin "$root" "the e2e control plane (Go >= 1.24)" all_fresh
log="$root/build.log"

# build MODULE LDFLAGS NAME PACKAGE...: build into a temporary dir, then move into place, so an
# interrupted build never leaves a truncated binary that looks fresh. NAME names the binary of
# a single package ("" keeps Go's names).
build() {
  local module="$1" ldflags="$2" name="$3" started tmp
  shift 3
  started=$(date +%s)
  tmp="$(mktemp -d "$root/tmp.XXXXXX")"
  echo "build.sh: building $module ($*) -- a cold build takes minutes; log: $log" >&2
  if ! (cd "$here/$module" && nice -n 10 go build -trimpath -ldflags="$ldflags" -o "$tmp/$name" "$@") \
    >>"$log" 2>&1; then
    rm -rf "$tmp"
    echo "build.sh: building $module failed; the end of $log:" >&2
    tail -n 30 "$log" >&2
    exit 1
  fi
  mv -f "$tmp"/* "$bin/"
  rm -rf "$tmp"
  stamp "$module" "$ldflags" >"$bin/.$module.stamp"
  echo "build.sh: $module built in $(($(date +%s) - started)) s" | tee -a "$log" >&2
}

started=$(date +%s)
echo "== $(date -u +%FT%TZ) build.sh $key" >>"$log"
fresh etcd "$etcd_ldflags" etcd || build etcd "$etcd_ldflags" etcd go.etcd.io/etcd/server/v3
fresh kube "$kube_ldflags" "${kube_binaries[@]}" \
  || build kube "$kube_ldflags" "" "${kube_binaries[@]/#/k8s.io/kubernetes/cmd/}"
fresh helm "$helm_ldflags" helm || build helm "$helm_ldflags" "" helm.sh/helm/v3/cmd/helm
echo "build.sh: control plane ready in $bin ($(($(date +%s) - started)) s)" | tee -a "$log" >&2
