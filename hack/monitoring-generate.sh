#!/usr/bin/env bash
# Writes the copies of the alert rules (deploy/prometheus/leader-elector-rules.yaml,
# the one source) that the Helm chart and the kustomize component need: Helm's
# .Files.Get and kustomize read only files under their own root, so neither can
# read deploy/. test/packaging's TestMonitoringCopiesCurrent runs this script on
# a copy of the tree and fails if a committed copy differs.
#
# Usage: hack/monitoring-generate.sh [repository root]
set -euo pipefail
root="${1:-$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)}"
src="$root/deploy/prometheus/leader-elector-rules.yaml"
note="# Generated from deploy/prometheus/leader-elector-rules.yaml by make monitoring-generate: edit that file, not this one."

mkdir -p "$root/charts/leader-elector/files"
{ echo "$note"; cat "$src"; } >"$root/charts/leader-elector/files/leader-elector-rules.yaml"

# The PrometheusRule's spec is the rule file's top level (groups:), indented.
{
	echo "$note"
	cat <<'HEAD'
apiVersion: monitoring.coreos.com/v1
kind: PrometheusRule
metadata:
  name: leader-elector
  labels:
    app.kubernetes.io/name: leader-elector
    app.kubernetes.io/component: monitoring
spec:
HEAD
	grep -v '^#' "$src" | sed 's/^\(.\)/  \1/'
} >"$root/manifests/components/monitoring/prometheusrule.yaml"
