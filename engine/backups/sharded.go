package backups

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"strings"
	"time"

	"github.com/minio/minio-go/v7"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"example.com/cache-operator/engine/api"
	"example.com/cache-operator/engine/metrics"
	"example.com/cache-operator/engine/objectstore"
	"example.com/cache-operator/engine/render"
)

// A sharded cache's backup is one snapshot per shard, streamed side by side by one Job (a
// container per shard), each to its own object in the backup's folder
// (<cache folder><backup>/shard-<i>.rdb, its manifest beside it). Each shard's snapshot is
// consistent on its own; the shards' are taken within the same seconds, not at one instant.
// status.shards records, for each shard, the slots it served, the member, the object, its size,
// keys and checksum: what a restore into a cache of as many shards needs.

// shardBackup is one shard's entry in a backup's status.shards.
type shardBackup struct {
	Shard       int64  `json:"shard"`
	Slots       string `json:"slots"`
	Member      string `json:"member"`
	FromPrimary bool   `json:"fromPrimary,omitempty"`
	Location    string `json:"location"`
	Bytes       int64  `json:"bytes,omitempty"`
	Keys        int64  `json:"keys,omitempty"`
	Checksum    string `json:"checksum,omitempty"`
}

// shardParts chooses, for each shard below spec.shards, the member to stream (a replica in sync
// with its primary, the highest ordinal first; otherwise the primary) and records the slots its
// primary serves, from the cache's status. why says what is missing when a shard has no primary.
func shardParts(mc *unstructured.Unstructured, spec api.Spec, domain string) ([]render.BackupPart, []shardBackup, string) {
	if r := api.ReshardOf(mc); r != nil {
		return nil, nil, fmt.Sprintf("a reshard to %d shards is running (%d slots to move): the backup starts once it has finished, so that every shard's slots are settled", r.Shards, r.SlotsToMove)
	}
	type shard struct {
		primary, slots string
		inSync         []string
	}
	shards := make([]shard, spec.Shards)
	members, _, _ := unstructured.NestedSlice(mc.Object, "status", "members")
	for _, m := range members {
		mm, _ := m.(map[string]interface{})
		name, _ := mm["name"].(string)
		i, _, ok := api.ShardMemberOf(mc.GetName(), name)
		if !ok || i >= len(shards) {
			continue
		}
		_, lagging := mm["lagBytes"]
		switch mm["role"] {
		case api.RolePrimary:
			shards[i].primary, _ = mm["name"].(string)
			shards[i].slots, _ = mm["slots"].(string)
		case api.RoleReplica:
			if !lagging {
				shards[i].inSync = append(shards[i].inSync, name)
			}
		}
	}
	var parts []render.BackupPart
	var out []shardBackup
	for i, s := range shards {
		if s.primary == "" || s.slots == "" {
			return nil, nil, fmt.Sprintf("shard %d has no primary serving slots in the cache's status yet", i)
		}
		pick := s.primary
		if len(s.inSync) > 0 {
			sort.Strings(s.inSync)
			pick = s.inSync[len(s.inSync)-1]
		}
		parts = append(parts, render.BackupPart{Container: fmt.Sprintf("backup-s%d", i), Member: pick,
			MemberHost: api.ServiceHost(pick+"."+mc.GetName(), mc.GetNamespace(), domain), FromPrimary: pick == s.primary})
		out = append(out, shardBackup{Shard: int64(i), Slots: s.slots, Member: pick, FromPrimary: pick == s.primary})
	}
	return parts, out, ""
}

// shardedFolder is the key prefix of a sharded backup's objects, and shardKey one shard's object.
func shardedFolder(store objectstore.Store, ns, cache, backup string) string {
	return store.CacheFolder(ns, cache) + backup + "/"
}

func shardKey(folder string, shard int64) string { return fmt.Sprintf("%sshard-%d.rdb", folder, shard) }

// startSharded starts a sharded cache's backup: a Job with a container per shard.
func (c *Controller) startSharded(ctx context.Context, mc *unstructured.Unstructured, spec api.Spec, b *unstructured.Unstructured, store objectstore.Store) (time.Duration, error) {
	parts, shards, why := shardParts(mc, spec, c.opts.Render.ClusterDomain)
	if why != "" {
		reason := api.ReasonCacheNotReady
		if api.ReshardOf(mc) != nil {
			reason = api.ReasonBackupWaitsForReshard
		}
		return 10 * time.Second, c.setStatus(ctx, b, backupStatus{Phase: api.BackupPending, Reason: reason, Message: why})
	}
	folder := shardedFolder(store, mc.GetNamespace(), mc.GetName(), b.GetName())
	var from []string
	reason := api.ReasonFromReplica
	for i := range parts {
		parts[i].ObjectKey = shardKey(folder, shards[i].Shard)
		shards[i].Location = store.Location(parts[i].ObjectKey)
		from = append(from, fmt.Sprintf("shard %d from %s", shards[i].Shard, parts[i].Member))
		if parts[i].FromPrimary {
			reason, from[i] = api.ReasonFromPrimary, from[i]+" (its primary: no replica in sync)"
		}
	}
	jobName := api.BackupJobName(b.GetName())
	job, err := c.renderer.BackupJobFor(mc, b, spec, c.opts.Render, render.BackupJob{
		Name: b.GetName(), JobName: jobName, StoreSecret: spec.Backup.StoreSecret, Parts: parts})
	if err != nil {
		return 0, c.fail(ctx, mc, b, backupStatus{}, "RenderFailed", err.Error())
	}
	if d, err := c.createJob(ctx, mc, job); d > 0 || err != nil {
		return d, err
	}
	msg := "streaming " + strings.Join(from, ", ")
	st := backupStatus{Phase: api.BackupRunning, Reason: reason, Message: msg, StartTime: c.opts.Now().UTC().Format(time.RFC3339),
		Engine: spec.Engine.Name, Location: store.Location(folder), StoreSecret: spec.Backup.StoreSecret, Job: jobName, Shards: shards}
	c.recorder.Eventf(b, corev1.EventTypeNormal, api.EventBackupStarted, "Backing up %s's %d shards to %s", mc.GetName(), len(shards), st.Location)
	c.recorder.Eventf(mc, corev1.EventTypeNormal, api.EventBackupStarted, "Backup %s: %s, to %s", b.GetName(), msg, st.Location)
	return pollRunning, c.setStatus(ctx, b, st)
}

// completeSharded reads every shard's manifest once the Job completed, checks that no shard's
// slots moved meanwhile, and fills the status.
func (c *Controller) completeSharded(ctx context.Context, mc, b *unstructured.Unstructured, st backupStatus) (time.Duration, error) {
	store, cl, err := c.storeClient(ctx, b.GetNamespace(), st.StoreSecret)
	if err != nil {
		return 0, err
	}
	if moved := slotsMoved(mc, st.Shards); moved != "" {
		return 0, c.fail(ctx, mc, b, st, api.ReasonResharded, moved+": the shards' snapshots may hold keys of slots another shard serves now; take the backup again")
	}
	var first, last time.Time
	st.Bytes, st.Keys = 0, 0
	for i, s := range st.Shards {
		key := strings.TrimPrefix(s.Location, "s3://"+store.Bucket+"/")
		m, err := objectstore.ReadManifest(ctx, cl, store.Bucket, key)
		if minio.ToErrorResponse(errors.Unwrap(err)).Code == "NoSuchKey" || minio.ToErrorResponse(err).Code == "NoSuchKey" {
			return 0, c.fail(ctx, mc, b, st, api.ReasonManifestUnreadable, "the Job completed but "+objectstore.ManifestKey(s.Location)+" does not exist: shard "+fmt.Sprint(s.Shard)+"'s backup did not finish")
		}
		if err != nil {
			return 0, fmt.Errorf("ManagedCacheBackup/%s/%s: reading shard %d's manifest: %w", b.GetNamespace(), b.GetName(), s.Shard, err)
		}
		st.Shards[i].Bytes, st.Shards[i].Keys, st.Shards[i].Checksum = m.Bytes, m.Keys, m.SHA256
		st.Bytes, st.Keys, st.Engine, st.Version = st.Bytes+m.Bytes, st.Keys+m.Keys, m.Engine, m.Version
		if first.IsZero() || m.Start.Before(first) {
			first = m.Start
		}
		if m.End.After(last) {
			last = m.End
		}
	}
	st.Phase = api.BackupCompleted
	st.Message = fmt.Sprintf("%d bytes, %d keys from %d shards (%s %s)", st.Bytes, st.Keys, len(st.Shards), st.Engine, st.Version)
	st.EndTime = c.opts.Now().UTC().Format(time.RFC3339)
	if err := c.setStatus(ctx, b, st); err != nil {
		return 0, err
	}
	start, _ := time.Parse(time.RFC3339, st.StartTime)
	metrics.BackupCompleted(mc.GetNamespace(), mc.GetName(), start, last.Sub(first), st.Bytes)
	c.markExported(mc.GetNamespace()+"/"+mc.GetName(), start)
	c.recorder.Eventf(b, corev1.EventTypeNormal, api.EventBackupCompleted, "%s: %s", st.Location, st.Message)
	c.recorder.Eventf(mc, corev1.EventTypeNormal, api.EventBackupCompleted, "Backup %s completed: %s", b.GetName(), st.Message)
	c.reconciles.Add(mc.GetNamespace() + "/" + mc.GetName())
	return 0, nil
}

// slotsMoved says how the cache's slots differ from those a backup recorded ("": they do not).
func slotsMoved(mc *unstructured.Unstructured, shards []shardBackup) string {
	if r := api.ReshardOf(mc); r != nil {
		return fmt.Sprintf("a reshard to %d shards started during the backup", r.Shards)
	}
	now := map[int]string{}
	members, _, _ := unstructured.NestedSlice(mc.Object, "status", "members")
	for _, m := range members {
		mm, _ := m.(map[string]interface{})
		name, _ := mm["name"].(string)
		if i, _, ok := api.ShardMemberOf(mc.GetName(), name); ok && mm["role"] == api.RolePrimary {
			now[i], _ = mm["slots"].(string)
		}
	}
	for _, s := range shards {
		if got, ok := now[int(s.Shard)]; ok && got != s.Slots { // (a shard failing over lists no primary: not a move)
			return fmt.Sprintf("shard %d served %s when the backup started and %s now", s.Shard, s.Slots, got)
		}
	}
	return ""
}
