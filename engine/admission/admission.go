// Package admission is the ManagedCache validating webhook: the rules that the CRD schema cannot
// express because they compare the new object with the old one.
//
//   - Quorum guard: a decrease of the member count that leaves fewer than a majority of the
//     current members (new < old/2+1) is rejected, on the object and on the scale subresource,
//     unless the object carries the annotation cache.example.com/allow-quorum-loss: "true".
//   - No major downgrade: a version change to an older major version is rejected (the older
//     server cannot read the newer one's data files).
//
// It is not for schema validation (the CRD does that at once, without the operator running).
package admission

import (
	"fmt"
	"strconv"
	"strings"
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
	// Annotations are the object's annotations (for the override).
	Annotations map[string]string
}

// Validate returns why the change is rejected, or nil.
func Validate(c Change) error {
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
	if c.OldVersion != "" && c.NewVersion != "" && c.OldVersion != c.NewVersion {
		oldMajor, okOld := major(c.OldVersion)
		newMajor, okNew := major(c.NewVersion)
		if okOld && okNew && newMajor < oldMajor {
			return fmt.Errorf("%s: downgrading from %s to %s crosses a major version: version %d cannot read the "+
				"data files that version %d wrote; keep %d.x, or create a new cache for %s",
				c.VersionField, c.OldVersion, c.NewVersion, newMajor, oldMajor, oldMajor, c.NewVersion)
		}
	}
	return nil
}

func major(v string) (int, bool) {
	m, _, _ := strings.Cut(v, ".")
	n, err := strconv.Atoi(m)
	return n, err == nil
}
