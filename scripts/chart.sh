#!/usr/bin/env bash
# The Helm chart deploy/helm/sriov-rdma is the one source of the DaemonSet and its ConfigMap; the kustomize base's
# deploy/sriov-rdma.yaml is its `helm template` with the default values.
#   scripts/chart.sh render   writes deploy/sriov-rdma.yaml                          (make manifests)
#   scripts/chart.sh check    helm lint; helm template of the defaults and of values that change the output
#                             (numVfs, a policy, raw JSON, the DRA driver, a bad value refused by values.schema.json); the chart's
#                             appVersion is Cargo.toml's version; deploy/sriov-rdma.yaml equals a fresh render
#                             (make chart, part of make unit)
# HELM=PATH uses that helm; else tests/k8s/build-components.sh helm gives the pinned one (built once, cached).
set -euo pipefail
top=$(cd "$(dirname "$0")/.." && pwd)
chart=$top/deploy/helm/sriov-rdma
base=$top/deploy/sriov-rdma.yaml
die() { echo "chart: $*" >&2; exit 1; }
if [ -z "${HELM:-}" ]; then
  dir=$("$top/tests/k8s/build-components.sh" helm | awk '$1 == "component" { print $3 }') \
    || die "building helm failed (tests/k8s/build-components.sh helm)"
  HELM=$dir/helm
fi
[ -x "$HELM" ] || die "no helm at $HELM"
export HELM_CACHE_HOME=${TMPDIR:-/tmp}/sriov-rdma-helm-cache HELM_CONFIG_HOME=${TMPDIR:-/tmp}/sriov-rdma-helm-config \
  HELM_DATA_HOME=${TMPDIR:-/tmp}/sriov-rdma-helm-data

render() {
  cat <<'HDR'
# Rendered from the Helm chart deploy/helm/sriov-rdma with its default values by `make manifests`
# (helm template sriov-rdma deploy/helm/sriov-rdma --namespace kube-system --set managedBy=kustomize): change the
# chart, not this file; `make chart` fails when the two differ. Installing with Helm instead: docs/install.md.
# The image is built by `make image` (localhost/sriov-rdma:VERSION, both binaries): load it on the nodes or push it
# to your registry and change `image` (values.yaml: image.repository, image.tag).
HDR
  "$HELM" template sriov-rdma "$chart" --namespace kube-system --set managedBy=kustomize
}

case "${1:-}" in
  render)
    out=$(render) || die "helm template failed"
    printf '%s\n' "$out" > "$base.tmp" && mv "$base.tmp" "$base"
    echo "chart: wrote $base"
    ;;
  check)
    "$HELM" lint --strict "$chart" >/dev/null || { "$HELM" lint --strict "$chart"; die "helm lint failed"; }
    cargo_v=$(sed -n 's/^version = "\(.*\)"/\1/p' "$top/Cargo.toml" | head -1)
    app_v=$(sed -n 's/^appVersion: "\(.*\)"/\1/p' "$chart/Chart.yaml")
    [ "$app_v" = "$cargo_v" ] || die "Chart.yaml appVersion $app_v is not Cargo.toml's version $cargo_v (the image tag)"
    t() { "$HELM" template sriov-rdma "$chart" --namespace kube-system "$@"; }
    # Defaults: unprivileged, no policy ConfigMap.
    out=$(t) || die "helm template failed"
    grep -q 'privileged: true' <<<"$out" && die "the default values render a privileged container"
    grep -q 'drop: \["ALL"\]' <<<"$out" || die "the default values do not drop every capability"
    grep -q 'component: node-policy' <<<"$out" && die "the default values render a policy ConfigMap"
    # numVfs (as an object, as raw JSON) makes the daemon privileged; a policy object renders its ConfigMap.
    t --set-json 'config={"numVfs":{"ens1f0":8},"resources":[]}' | grep -q 'privileged: true' \
      || die "numVfs in config does not make the daemon privileged"
    t --set-json 'configJson="{\"numVfs\":{\"ens1f0\":8}}"' | grep -q 'privileged: true' \
      || die "numVfs in configJson does not make the daemon privileged"
    t --set-json 'policy={"pfs":["ens1f0"]}' | grep -q '"ens1f0"' || die "a policy in the values renders no ConfigMap"
    # The DRA driver: nothing of it by default; enabled, its DeviceClass, ServiceAccount and the node's name.
    grep -qE 'kind: DeviceClass|NODE_NAME|plugins_registry' <<<"$out" && die "the default values render the DRA driver"
    dra=$(t --set dra.enabled=true) || die "helm template --set dra.enabled=true failed"
    for w in 'kind: DeviceClass' 'serviceAccountName: sriov-rdma-dra' 'name: NODE_NAME' 'path: /var/lib/kubelet/plugins_registry' \
             'mountPath: /var/run/cdi'; do
      grep -q "$w" <<<"$dra" || die "dra.enabled=true renders no '$w'"
    done
    # Refused: a value off the schema, JSON that does not parse.
    t --set logLevel=loud >/dev/null 2>&1 && die "logLevel=loud passed values.schema.json"
    t --set-string configJson=nope >/dev/null 2>&1 && die "configJson=nope rendered"
    fresh=$(render) || die "helm template failed"
    if ! diff -u "$base" <(printf '%s\n' "$fresh") >/tmp/sriov-rdma-chart.diff 2>&1; then
      head -40 /tmp/sriov-rdma-chart.diff >&2
      die "$base differs from the chart's render: run make manifests and commit it"
    fi
    echo "chart: helm lint, helm template (defaults, numVfs, policy, DRA, refused values) and deploy/sriov-rdma.yaml = render ($("$HELM" version --short 2>/dev/null))"
    ;;
  *) die "usage: scripts/chart.sh render|check" ;;
esac
