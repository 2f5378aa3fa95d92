#!/bin/bash
# Builds the third-party components of the Kubernetes node test from their published Go modules at pinned
# versions, into a cache outside the clone (one directory per component and version; a directory that exists
# is complete and is reused). Go's own module and build caches stay where Go keeps them.
#
#   tests/k8s/build-components.sh            build what is missing, print the directory of each component
#   tests/k8s/build-components.sh helm       only the named components (make helm: the chart's checks need helm)
#   K8S_COMPONENTS_CACHE=DIR ...             another cache directory
#   DROP_GOCACHE=1 ...                       a build cache of this run's own, emptied after each component built
#                                            and removed at the end (.ci/run: disk)
#
# Static where the component allows it (CGO_ENABLED=0); runc needs cgo (its nsenter is C) and is linked
# statically against glibc and libseccomp. Prints each component's build seconds and the total.
set -euo pipefail

HERE=$(cd "$(dirname "$0")" && pwd)
CACHE=${K8S_COMPONENTS_CACHE:-/var/cache/sriov-rdma-cni/components}
export GOTOOLCHAIN=local GOFLAGS=-buildvcs=false

KUBERNETES=v1.37.2
# Kubernetes 1.37 names etcd 3.7.0 (its go.mod and build/dependencies.yaml); 3.7.3 is that line's newest patch.
ETCD=v3.7.3
CONTAINERD=v2.4.2
RUNC=v1.5.3
CRI_TOOLS=v1.37.0
MULTUS=v4.2.3
RDMA_CNI=v1.6.0  # tests/k8s/go/multus and go/rdma-cni pin these two as well
WHEREABOUTS=v0.9.2  # and tests/k8s/go/whereabouts this one
# The Helm CLI of the chart's checks (make chart) and of tests/k8s/helm.sh.
HELM=v4.3.2

die() { echo "build-components: $*" >&2; exit 1; }
ALL="kubernetes etcd containerd runc cri-tools multus rdma-cni whereabouts helm"
ONLY=${*:-$ALL}
for c in $ONLY; do case " $ALL " in *" $c "*) ;; *) die "unknown component $c (one of: $ALL)" ;; esac; done
want() { case " $ONLY " in *" $1 "*) return 0 ;; *) return 1 ;; esac; }
# Go is checked when a component has to be built (a warm cache needs none).
gocheck() {
    command -v go >/dev/null || die "go is not on PATH (Go >= 1.26 is needed)"
    local gov
    gov=$(go env GOVERSION)
    case "$gov" in go1.2[6-9]*|go1.[3-9]*) ;; *) die "Go $gov is too old: the components need Go >= 1.26" ;; esac
}
mkdir -p "$CACHE" || die "cannot create the cache directory $CACHE"
# DROP_GOCACHE=1 (.ci/run sets it): only the binaries are kept. Go's build cache (gigabytes after Kubernetes) is
# dropped after each component, as the Rust build beside it needs the disk (a CI run of 7 December ran out). The
# cache is this run's own: `make test` runs this script in the background while `make chart` runs it for helm,
# and a `go clean -cache` of the shared one pulled the packages from under the other's `go build` (a cold run of
# 7 December: kubernetes failed on "could not import fmt (open .../go-build/...: no such file or directory)"
# the moment helm's build ended).
if [ "${DROP_GOCACHE:-}" = 1 ]; then
    GOCACHE=$(mktemp -d "${TMPDIR:-/var/tmp}/build-components-gocache.XXXXXX") || die "cannot create a Go build cache"
    export GOCACHE
    trap 'rm -rf "$GOCACHE"' EXIT
fi

total=0
# build NAME-VERSION BINARY... -- COMMAND...: runs COMMAND with $OUT set to a fresh directory, checks that every
# BINARY is there, then renames the directory into the cache (so a failed or interrupted build leaves nothing).
build() {
    local dir=$1; shift
    local bins=()
    while [ "$1" != -- ]; do bins+=("$1"); shift; done
    shift
    want "${dir%-v*}" || return 0
    if [ -d "$CACHE/$dir" ]; then
        echo "build-components: $dir cached in $CACHE/$dir"
        return
    fi
    gocheck
    OUT=$(mktemp -d "$CACHE/.build-$dir.XXXXXX")
    export OUT
    local start=$SECONDS
    echo "build-components: building $dir ..."
    # Go's "downloading" lines are noise; everything else it says is kept.
    if ! "$@" 2> >(grep -v '^go: downloading ' >&2); then
        rm -rf "$OUT"
        die "building $dir failed (command: $*)"
    fi
    for b in "${bins[@]}"; do
        [ -x "$OUT/$b" ] || { rm -rf "$OUT"; die "building $dir did not produce $b"; }
    done
    rm -rf "${CACHE:?}/$dir"
    mv "$OUT" "$CACHE/$dir"
    local secs=$((SECONDS - start))
    total=$((total + secs))
    echo "build-components: built $dir in ${secs}s"
    # DROP_GOCACHE=1: this run's own build cache emptied (see above).
    if [ "${DROP_GOCACHE:-}" = 1 ]; then go clean -cache || echo "build-components: go clean -cache failed" >&2; fi
}

# Kubernetes: our module (tests/k8s/go/kubernetes) requires k8s.io/kubernetes and replaces each staging module
# its go.mod points at ./staging with the matching v0.x release. One `go build` so shared packages compile once.
k8s_build() {
    local v=k8s.io/component-base/version
    (cd "$HERE/go/kubernetes" && CGO_ENABLED=0 nice -n 10 go build -trimpath \
        -ldflags "-s -w -X $v.gitVersion=$KUBERNETES -X $v.gitMajor=1 -X $v.gitMinor=37 -X $v.gitTreeState=clean \
                  -X k8s.io/client-go/pkg/version.gitVersion=$KUBERNETES" \
        -o "$OUT/" k8s.io/kubernetes/cmd/kube-apiserver k8s.io/kubernetes/cmd/kube-controller-manager \
        k8s.io/kubernetes/cmd/kube-scheduler k8s.io/kubernetes/cmd/kubelet k8s.io/kubernetes/cmd/kubectl)
}
build "kubernetes-$KUBERNETES" kube-apiserver kube-controller-manager kube-scheduler kubelet kubectl -- k8s_build

# etcd: its modules replace each other with relative paths, so `go install …@version` refuses them; our module
# (tests/k8s/go/etcd) requires server and etcdctl at one version.
# `go build -o DIR` names both binaries v3 (the last path element): build them one at a time instead.
etcd_build() {
    (cd "$HERE/go/etcd" &&
        CGO_ENABLED=0 nice -n 10 go build -trimpath -ldflags "-s -w" -o "$OUT/etcd" go.etcd.io/etcd/server/v3 &&
        CGO_ENABLED=0 nice -n 10 go build -trimpath -ldflags "-s -w" -o "$OUT/etcdctl" go.etcd.io/etcd/etcdctl/v3)
}
build "etcd-$ETCD" etcd etcdctl -- etcd_build

# go install of published modules without replace directives, into $OUT.
goinstall() { GOBIN=$OUT CGO_ENABLED=${CGO:-0} nice -n 10 go install -trimpath "$@"; }

containerd_build() {
    local m=github.com/containerd/containerd/v2
    goinstall -ldflags "-s -w -X $m/version.Version=$CONTAINERD" \
        "$m/cmd/containerd@$CONTAINERD" "$m/cmd/containerd-shim-runc-v2@$CONTAINERD" "$m/cmd/ctr@$CONTAINERD"
}
build "containerd-$CONTAINERD" containerd containerd-shim-runc-v2 ctr -- containerd_build

# runc: cgo (libcontainer/nsenter) and libseccomp (the seccomp tag), both linked statically; Go's own user
# and DNS lookups (osusergo, netgo), as glibc's need its shared libraries at run time.
runc_build() {
    CGO=1 goinstall -tags "seccomp osusergo netgo" -ldflags "-s -w -X main.version=${RUNC#v} -extldflags -static" \
        "github.com/opencontainers/runc@$RUNC"
}
build "runc-$RUNC" runc -- runc_build

build "cri-tools-$CRI_TOOLS" crictl -- goinstall -ldflags "-s -w" "sigs.k8s.io/cri-tools/cmd/crictl@$CRI_TOOLS"

# Modules built from a go.mod of ours (tests/k8s/go/NAME) that requires them as tools: `go install …@version`
# asks the proxy for the module's version list (deprecation check), which the proxy here refuses for these.
modbuild() { # modbuild DIR BINARY PACKAGE
    (cd "$HERE/go/$1" && CGO_ENABLED=0 nice -n 10 go build -trimpath -ldflags "-s -w" -o "$OUT/$2" "$3")
}
# Multus v4, the thin plugin (the binary the container runtime calls; reads NADs from the API server).
build "multus-$MULTUS" multus -- modbuild multus multus gopkg.in/k8snetworkplumbingwg/multus-cni.v4/cmd/multus

# The anchor rdma-cni (issue 18's comparison).
build "rdma-cni-$RDMA_CNI" rdma -- modbuild rdma-cni rdma github.com/k8snetworkplumbingwg/rdma-cni/cmd/rdma

# whereabouts, the cluster-wide IPAM (tests/k8s/whereabouts.sh): its module has a replace directive, which `go
# install …@version` refuses. Its CRDs (the IPPool its allocations live in) come from the same module, and so does
# ip-control-loop, its garbage collection of allocations whose pod is gone (cluster.sh's cluster-whereabouts-gc).
# The directory's name says it holds ip-control-loop: a cached directory of the same version without it is not reused.
whereabouts_build() {
    local m=github.com/k8snetworkplumbingwg/whereabouts
    modbuild whereabouts whereabouts "$m/cmd"
    modbuild whereabouts ip-control-loop "$m/cmd/controlloop"
    mkdir -p "$OUT/crds"
    cp "$(cd "$HERE/go/whereabouts" && go list -m -f '{{.Dir}}' "$m")"/doc/crds/whereabouts.cni.cncf.io_*.yaml "$OUT/crds/"
}
build "whereabouts-$WHEREABOUTS-gc" whereabouts ip-control-loop -- whereabouts_build

# Helm v4 from its module (helm.sh/helm/v4 has no replace directives); `helm version` says the module's version.
build "helm-$HELM" helm -- goinstall -ldflags "-s -w" "helm.sh/helm/v4/cmd/helm@$HELM"

echo "build-components: total build seconds this run: $total"
for d in "kubernetes-$KUBERNETES" "etcd-$ETCD" "containerd-$CONTAINERD" "runc-$RUNC" "cri-tools-$CRI_TOOLS" \
    "multus-$MULTUS" "rdma-cni-$RDMA_CNI" "whereabouts-$WHEREABOUTS-gc" "helm-$HELM"; do
    want "${d%-v*}" && echo "component $d $CACHE/$d"
done
exit 0
