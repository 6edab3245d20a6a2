#!/usr/bin/env bash
# Prints what blocks a ManagedCache: its conditions, each member's state and reason (waiting,
# terminated, the last termination), and the last Warning Events of its pods. make up runs it when
# the sample is not Ready in time; run it by hand the same way:
#
#   KUBECTL=bin/cluster/kubectl KUBECONFIG=.cluster/kubeconfig hack/diagnose.sh shop sessions
set -uo pipefail
ns=${1:?namespace}
name=${2:?cache name}
k=("${KUBECTL:-kubectl}")
[[ -n ${KUBECONFIG:-} ]] && k+=(--kubeconfig "$KUBECONFIG")
events=${EVENTS:-10}

tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
"${k[@]}" get managedcache "$name" -n "$ns" -o json >"$tmp/cache.json" 2>"$tmp/cache.err" || : >"$tmp/cache.json"
"${k[@]}" get pods -n "$ns" -l "app.kubernetes.io/instance=$name" -o json >"$tmp/pods.json" 2>/dev/null || echo '{"items":[]}' >"$tmp/pods.json"
"${k[@]}" get events -n "$ns" --field-selector type=Warning -o json >"$tmp/events.json" 2>/dev/null || echo '{"items":[]}' >"$tmp/events.json"

python3 - "$tmp" "$ns" "$name" "$events" <<'PY'
import json, os, sys
tmp, ns, name, limit = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4])

def load(f):
    try:
        with open(os.path.join(tmp, f)) as fh:
            text = fh.read()
        return json.loads(text) if text.strip() else None
    except (OSError, ValueError):
        return None

mc = load("cache.json")
if mc is None:
    print(f"diagnose: ManagedCache {ns}/{name} not found")
else:
    st = mc.get("status", {})
    print(f"diagnose: ManagedCache {ns}/{name}: primary {st.get('primary') or '-'}, "
          f"{st.get('readyReplicas', 0)}/{mc.get('spec', {}).get('replicas', '?')} ready")
    for c in st.get("conditions", []):
        print(f"  {c.get('type')}={c.get('status')} {c.get('reason', '')}: {c.get('message', '')}")

pods = sorted(load("pods.json")["items"], key=lambda p: p["metadata"]["name"])
print(f"diagnose: members ({len(pods)} pods):")
if not pods:
    print("  none: the StatefulSet has made no pod yet (see the cache's conditions and the operator's log)")
names = set()
for p in pods:
    meta, st = p["metadata"], p.get("status", {})
    names.add(meta["name"])
    ready = next((c.get("status") for c in st.get("conditions", []) if c.get("type") == "Ready"), "Unknown")
    role = meta.get("labels", {}).get("cache.example.com/role", "-")
    line = f"  {meta['name']}: phase {st.get('phase', '?')}, ready {ready}, role {role}, node {p.get('spec', {}).get('nodeName') or '-'}"
    if st.get("reason"):
        line += f", {st['reason']}: {st.get('message', '')}"
    print(line)
    for cs in st.get("initContainerStatuses", []) + st.get("containerStatuses", []):
        state = cs.get("state", {})
        kind = next(iter(state), "unknown")
        detail = state.get(kind, {}) or {}
        text = f"    {cs['name']}: {kind}"
        if detail.get("reason"):
            text += f" {detail['reason']}"
        if "exitCode" in detail:
            text += f" (exit {detail['exitCode']})"
        if detail.get("message"):
            text += f": {detail['message']}"
        text += f", restarts {cs.get('restartCount', 0)}"
        print(text)
        last = (cs.get("lastState") or {}).get("terminated")
        if last:
            print(f"      last: {last.get('reason', '')} (exit {last.get('exitCode')}): {last.get('message', '')}".rstrip(": "))

evs = [e for e in load("events.json")["items"]
       if e.get("involvedObject", {}).get("kind") == "Pod" and e["involvedObject"].get("name") in names]
evs.sort(key=lambda e: e.get("lastTimestamp") or e.get("eventTime") or e["metadata"].get("creationTimestamp") or "")
print(f"diagnose: last Warning Events of the pods ({min(len(evs), limit)} of {len(evs)}):")
for e in evs[-limit:]:
    when = e.get("lastTimestamp") or e.get("eventTime") or ""
    count = f" (x{e['count']})" if e.get("count", 1) > 1 else ""
    print(f"  {when} {e['involvedObject']['name']} {e.get('reason')}{count}: {e.get('message', '').strip()}")
if not evs:
    print("  none")
PY
