package dataplane

import (
	"context"
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/klog/v2"

	"example.com/cache-operator/engine/api"
	"example.com/cache-operator/engine/metrics"
	"example.com/cache-operator/engine/roles"
)

// A loss the operator can measure is never silent. A cache held keys at a pass; a later pass finds
// every member answering, none loading, none holding a key, and none on the replication history
// the keys were on (master_replid, or master_replid2 after a failover): the dataset was not
// emptied by its clients (a FLUSHALL, deletes and expiries keep the history), it started anew,
// as when every volume was lost. That is reported once per history: a Warning Event naming the
// keys last seen (and how to restore the last backup, when there is one), the counters
// cache_operator_data_lost_total and cache_operator_data_lost_keys_total, and the DataLost
// condition (status), which stays until the cache's spec changes.
//
// What a pass remembers lives in this process: a loss that happens while no operator runs, and
// is complete before the next leader's first pass, is not seen.

// dataLoss is what the passes remember of a cache's dataset.
type dataLoss struct {
	// keys is the most keys a member held at the last pass that saw any, on history (the
	// replication IDs of the members that held them).
	keys    int64
	history map[string]bool
	// message is the last loss reported ("": none), at generation.
	message    string
	generation int64
}

// checkDataLoss follows a cache's dataset from a pass's members and reports a loss.
func (c *Controller) checkDataLoss(ctx context.Context, mc *unstructured.Unstructured, members []roles.Member, d *dataLoss) {
	if d.message != "" && mc.GetGeneration() != d.generation {
		d.message = "" // the spec changed since: the user has acted on it
	}
	var most int64
	histories := map[string]bool{}
	for _, m := range members {
		if !m.Observed || m.Repl.Loading {
			return // not every member can say what it holds yet
		}
		most = max(most, m.Repl.Keys)
		if m.Repl.Keys > 0 && m.Repl.ReplID != "" {
			histories[m.Repl.ReplID] = true
		}
	}
	if len(members) == 0 {
		return
	}
	if most > 0 {
		d.keys, d.history = most, histories
		return
	}
	if d.keys == 0 {
		return
	}
	for _, m := range members {
		if d.history[m.Repl.ReplID] || d.history[m.Repl.ReplID2] {
			return // emptied on the same history: by its clients
		}
	}
	keys := d.keys
	d.keys, d.history = 0, nil
	msg := fmt.Sprintf("every member came back empty on a new replication history at %s; the cache held %d keys at the last poll that saw any",
		time.Now().UTC().Format(time.RFC3339), keys)
	if b := api.BackupStatusOf(mc); b != nil && b.LastBackup != "" {
		msg += fmt.Sprintf(". The last backup is %s: restore it into a new cache with spec.restore: {backup: %s}", b.LastBackup, b.LastBackup)
	} else {
		msg += ". The cache has no backup to restore"
	}
	d.message, d.generation = msg, mc.GetGeneration()
	metrics.DataLost(mc.GetNamespace(), mc.GetName(), keys)
	klog.FromContext(ctx).Info("Data lost: every member came back empty", "keys", keys)
	c.recorder.Eventf(mc, corev1.EventTypeWarning, api.ReasonDataLost, "Data lost: %s", msg)
}
