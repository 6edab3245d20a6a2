// Package admission is the ManagedCache validating webhook: the rules that the CRD schema cannot
// express because they compare the new object with the old one.
//
//   - Quorum guard: a decrease of the member count that leaves fewer than a majority of the
//     current members (new < old/2+1) is rejected, on the object and on the scale subresource,
//     unless the object carries the annotation cache.example.com/allow-quorum-loss: "true".
//   - The data must survive a version or engine change (engine/support): a downgrade across a
//     snapshot format change, or an engine the target cannot load (valkey to redis, redis 8 to
//     valkey), is rejected unless the object carries the annotation
//     cache.example.com/allow-data-loss: "true" (every member then restarts empty); a pair the
//     support matrix does not list is rejected in any case.
//   - spec.restore is set at creation only: adding, changing or removing it is rejected (the CRD
//     says so for v2; a v1 object carries it in its v2-spec annotation, judged here).
//   - A cache is sharded (spec.shards) or not for its whole life: adding or removing spec.shards is
//     rejected, with the way to do it (a new cache, restored from a backup). A v1 object carries
//     spec.shards in its v2-spec annotation, which its own schema cannot check: the shard count's
//     range and the engine's cluster mode are judged here for both versions.
//
// It is not for schema validation (the CRD does that at once, without the operator running).
package admission

import (
	"errors"
	"fmt"

	"example.com/cache-operator/engine/api"
	"example.com/cache-operator/engine/support"
)

// AllowQuorumLossAnnotation, set to "true", lets a scale-down drop below a majority.
const AllowQuorumLossAnnotation = "cache.example.com/allow-quorum-loss"

// Change is what the rules read of an update, in the terms of the version the user wrote.
type Change struct {
	// ReplicasField and VersionField name the fields in the user's API version (spec.size or
	// spec.replicas; spec.version or spec.engine.version).
	ReplicasField, VersionField string
	OldReplicas, NewReplicas    int64
	OldVersion, NewVersion      string
	// EngineField names the engine's field; OldEngine and NewEngine are its values (redis when
	// not set).
	EngineField          string
	OldEngine, NewEngine string
	// Annotations are the object's annotations (for the override).
	Annotations map[string]string
	// Create: the change makes the cache (the Old fields are empty).
	Create bool
	// ShardsField names spec.shards in the user's version; OldShards and NewShards are its values
	// (0: not sharded).
	ShardsField          string
	OldShards, NewShards int64
	// Resharding is the old object's status.reshard: a reshard runs (nil: none).
	Resharding *api.ReshardStatus
	// NotServed is what of the new sharded spec this version does not serve yet
	// (api.Spec.ShardedNotServed; "" when none).
	NotServed string
	// RestoreField names spec.restore in the user's version; RestoreChanged says an update adds,
	// changes or removes it (judged on the v2 form of both objects).
	RestoreField   string
	RestoreChanged bool
}

// Validate returns why the change is rejected, or nil.
func Validate(c Change) error {
	if c.RestoreChanged {
		// The CRD's rule for v2, judged here for v1, whose schema cannot see spec.restore in the
		// v2-spec annotation.
		return fmt.Errorf("%s: spec.restore is set when the cache is created, never added, changed or removed afterwards "+
			"(the first member holds data already); to restore a backup, create a new cache with spec.restore", c.RestoreField)
	}
	if err := validateShards(c); err != nil {
		return err
	}
	if c.NewReplicas < c.OldReplicas {
		majority := c.OldReplicas/2 + 1
		if c.NewReplicas < majority && c.Annotations[AllowQuorumLossAnnotation] != "true" {
			step := fmt.Sprintf("scale down in steps that keep a majority (to %d first)", majority)
			if majority >= c.OldReplicas {
				step = fmt.Sprintf("a cache of %d members cannot lose one and keep a majority", c.OldReplicas)
			}
			return fmt.Errorf("%s: scaling from %d to %d members leaves fewer than a majority (%d) of the current "+
				"members, which loses the cache's quorum and may lose data; %s; to accept the loss, annotate the "+
				"ManagedCache with %s=\"true\"",
				c.ReplicasField, c.OldReplicas, c.NewReplicas, majority, step, AllowQuorumLossAnnotation)
		}
	}
	if c.NewVersion == "" {
		return nil
	}
	newEngine, oldEngine := or(c.NewEngine, "redis"), or(c.OldEngine, "redis")
	if newEngine != oldEngine || c.NewVersion != c.OldVersion {
		if err := support.Unsupported(newEngine, c.NewVersion); err != nil {
			return fmt.Errorf("%s: %w", c.VersionField, err)
		}
	}
	if c.OldVersion == "" {
		return nil
	}
	if why := support.ChangeRefusal(oldEngine, c.OldVersion, newEngine, c.NewVersion); why != "" && c.Annotations[api.AllowDataLossAnnotation] != "true" {
		return fmt.Errorf("%s: changing from %s %s to %s %s would lose the data: %s; keep %s %s, or create a new cache "+
			"of %s %s and move the data (a backup restores only into a version that can load it); to accept losing every "+
			"key, annotate the ManagedCache with %s=\"true\" first (every member then restarts empty on %s %s)",
			c.VersionField, oldEngine, c.OldVersion, newEngine, c.NewVersion, why, oldEngine, c.OldVersion, newEngine, c.NewVersion,
			api.AllowDataLossAnnotation, newEngine, c.NewVersion)
	}
	return nil
}

// validateShards judges spec.shards: its range, the mode change, and the engine's cluster mode.
func validateShards(c Change) error {
	if c.NewShards < 0 {
		return fmt.Errorf("%s: must be a whole number between %d and %d", c.ShardsField, api.MinShards, api.MaxShards)
	}
	if c.NewShards != 0 && (c.NewShards < api.MinShards || c.NewShards > api.MaxShards) {
		return fmt.Errorf("%s: must be between %d and %d (a cluster needs a majority of its primaries to fail one over), got %d",
			c.ShardsField, api.MinShards, api.MaxShards, c.NewShards)
	}
	if !c.Create && (c.OldShards > 0) != (c.NewShards > 0) {
		from, to := "a primary/replica cache", fmt.Sprintf("a sharded cache of %d shards", c.NewShards)
		if c.OldShards > 0 {
			from, to = fmt.Sprintf("a sharded cache of %d shards", c.OldShards), "a primary/replica cache"
		}
		return fmt.Errorf("%s: cannot turn %s into %s: a cache is sharded or not for its whole life (its data is one "+
			"keyspace on every member, or spread over the shards' hash slots); create a new cache of the other kind "+
			"with spec.restore naming a backup of this one, move the clients, then delete this one",
			c.ShardsField, from, to)
	}
	if c.NewShards > 0 && c.NewVersion != "" {
		if why := support.ClusterRefusal(or(c.NewEngine, "redis"), c.NewVersion); why != "" {
			return fmt.Errorf("%s: %s", c.ShardsField, why)
		}
	}
	if r := c.Resharding; !c.Create && c.OldShards > 0 && c.NewShards > 0 && c.OldShards != c.NewShards && r != nil {
		return fmt.Errorf("%s: a reshard to %d shards is running (%d slots moved, %d to move): change the number of shards "+
			"once it has finished (the Resharding condition is gone); a change is refused, not queued, so that each reshard "+
			"is one the status reports from start to end", c.ShardsField, r.Shards, r.SlotsMoved, r.SlotsToMove)
	}
	if c.NotServed != "" {
		return errors.New(c.NotServed)
	}
	return nil
}

func or(s, def string) string {
	if s == "" {
		return def
	}
	return s
}
