#!/usr/bin/env bash
# make deploy: deploys the operator into the cluster of $KUBECONFIG (the local one by default) with
# `kubectl apply --server-side -k hack/deploy-local` (manifests/ plus --member-networks for the
# local cluster's real pod range), then waits until both replicas are Ready. On your own cluster,
# apply manifests/ itself.
#
# On a fresh cluster that is the whole story. A cluster where an operator ran outside it with its
# own webhook address (`--webhook-url`) has that URL in the CRD's conversion config, owned by the
# operator; the deployed operator is reached through a Service, and a CRD may not name both, so the
# apply would be refused. The CRD is pointed at the Service first.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
read -ra k <<<"${KUBECTL:-bin/cluster/kubectl}"
crd=managedcaches.cache.example.com
if url=$("${k[@]}" get crd "$crd" -o jsonpath='{.spec.conversion.webhook.clientConfig.url}' 2>/dev/null) && [[ -n $url ]]; then
	echo "deploy: pointing the CRD's conversion webhook at the Service (it named $url)"
	"${k[@]}" patch crd "$crd" --type=merge -p '{"spec":{"conversion":{"webhook":{"clientConfig":{"url":null,
		"service":{"namespace":"cache-operator-system","name":"cache-operator-webhook","path":"/convert","port":443}}}}}}' >/dev/null
fi
echo "deploy: kubectl apply --server-side -k hack/deploy-local (manifests/ plus --member-networks)"
"${k[@]}" apply --server-side --force-conflicts -k hack/deploy-local
echo "deploy: waiting for the operator's two replicas to be Ready ..."
"${k[@]}" rollout status deployment/cache-operator -n cache-operator-system --timeout=180s
