#!/usr/bin/env bash
# The tools this project is compared with and migrated from, at pinned versions, into a cache outside the clone:
# sriov-cni v2.10.0 and main 1b7acc5b, rdma-cni v1.6.0, the SR-IOV network device plugin v3.11.0 (and CRI-O
# v1.36.3 with its pinns, for the second runtime). Each is built from its Go module first (`go install
# module@version`, what works on a user's machine); where the module proxy refuses it, the release build in
# ../shared/prebuilt (from the project root; PREBUILT overrides) is used, checked against its SHA256SUMS. Each
# line on stderr says which was used. A copy already in the cache is checked before it is used (the checksum of
# the release build, or of the module build as recorded when it was built) and fetched again when it differs.
# Their source never enters the project.
#   anchors.sh [NAME...]   NAME: sriov-cni-v2.10.0 sriov-cni-1b7acc5b rdma-cni-v1.6.0 sriovdp-v3.11.0
#                          crio-v1.36.3 pinns-v1.36.3 (default: all); prints the bin directory (last line)
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
cache=${SRIOV_RDMA_COMPONENTS:-/var/cache/sriov-rdma-cni/components}/anchors
prebuilt=${PREBUILT:-$(cd "$here/../.." && pwd)/shared/prebuilt}
mkdir -p "$cache"
die() { echo "anchors: $*" >&2; exit 1; }

# name → module path and version for `go install` (pinns is a C program: prebuilt only).
module_of() {
  case "$1" in
    sriov-cni-v2.10.0) echo "github.com/k8snetworkplumbingwg/sriov-cni/cmd/sriov@v2.10.0" ;;
    sriov-cni-1b7acc5b) echo "github.com/k8snetworkplumbingwg/sriov-cni/cmd/sriov@1b7acc5b" ;;
    rdma-cni-v1.6.0) echo "github.com/k8snetworkplumbingwg/rdma-cni/cmd/rdma@v1.6.0" ;;
    sriovdp-v3.11.0) echo "github.com/k8snetworkplumbingwg/sriov-network-device-plugin/cmd/sriovdp@v3.11.0" ;;
    crio-v1.36.3) echo "github.com/cri-o/cri-o/cmd/crio@v1.36.3" ;;
    pinns-v1.36.3) echo "" ;;
    *) die "unknown tool $1 (sriov-cni-v2.10.0 sriov-cni-1b7acc5b rdma-cni-v1.6.0 sriovdp-v3.11.0 crio-v1.36.3 pinns-v1.36.3)" ;;
  esac
}

from_module() {
  local name=$1 mod=$2 tmp
  [ -n "$mod" ] || { echo "anchors: $name has no Go module (a C program); using the release build" >&2; return 1; }
  command -v go >/dev/null || { echo "anchors: $name: no go on PATH to build $mod; using the release build" >&2; return 1; }
  tmp=$(mktemp -d "$cache/.go-XXXXXX")
  if GOBIN=$tmp CGO_ENABLED=0 GOFLAGS="${GOFLAGS:-} -trimpath" nice -n 10 go install "$mod" >"$tmp.log" 2>&1; then
    mv "$tmp"/* "$cache/$name" && rm -rf "$tmp" "$tmp.log"
    # What was built, and its checksum, so a later run can tell the cached copy is still this build.
    echo "$mod $(sha256sum "$cache/$name" | cut -d' ' -f1)" > "$cache/$name.module"
    echo "anchors: $name built from its module ($mod)" >&2
    return 0
  fi
  echo "anchors: $name: go install $mod failed ($(grep -m1 -oE '(40[0-9] [A-Za-z ]+|no matching versions[^"]*)' "$tmp.log" || tail -1 "$tmp.log")); using the release build" >&2
  rm -rf "$tmp" "$tmp.log"
  return 1
}

from_prebuilt() {
  local name=$1 want got
  [ -f "$prebuilt/$name" ] || die "$name: the module could not be built and $prebuilt/$name is missing"
  want=$(awk -v n="$name" '$2 == n { print $1 }' "$prebuilt/SHA256SUMS" 2>/dev/null)
  [ -n "$want" ] || die "$name: no checksum for it in $prebuilt/SHA256SUMS"
  got=$(sha256sum "$prebuilt/$name" | cut -d' ' -f1)
  [ "$got" = "$want" ] || die "$name: $prebuilt/$name has sha256 $got, SHA256SUMS says $want"
  install -m 0755 "$prebuilt/$name" "$cache/$name"
  rm -f "$cache/$name.module"
  echo "anchors: $name from $prebuilt (release build, sha256 $got checked)" >&2
}

# A copy in the cache is used only when its checksum is the one it was fetched with: the module build's (recorded
# in NAME.module) or the release build's (SHA256SUMS). Anything else is removed and fetched again.
cached() {
  local name=$1 got want
  [ -x "$cache/$name" ] || return 1
  got=$(sha256sum "$cache/$name" | cut -d' ' -f1)
  if [ -f "$cache/$name.module" ]; then
    want=$(cut -d' ' -f2 "$cache/$name.module"); what="built from its module $(cut -d' ' -f1 "$cache/$name.module")"
  else
    want=$(awk -v n="$name" '$2 == n { print $1 }' "$prebuilt/SHA256SUMS" 2>/dev/null); what="the release build of $prebuilt"
  fi
  if [ -n "$want" ] && [ "$got" = "$want" ]; then
    echo "anchors: $name from the cache $cache ($what, sha256 $got checked)" >&2
    return 0
  fi
  echo "anchors: $name in the cache has sha256 $got, not ${want:-a known one} ($what): fetching it again" >&2
  rm -f "$cache/$name" "$cache/$name.module"
  return 1
}

names=("$@")
[ ${#names[@]} -gt 0 ] || names=(sriov-cni-v2.10.0 sriov-cni-1b7acc5b rdma-cni-v1.6.0 sriovdp-v3.11.0 crio-v1.36.3 pinns-v1.36.3)
for n in "${names[@]}"; do
  mod=$(module_of "$n")
  cached "$n" && continue
  from_module "$n" "$mod" || from_prebuilt "$n"
done
echo "$cache"
