package credentials

import (
	"context"
	"slices"

	"github.com/redis/go-redis/v9"
	"k8s.io/klog/v2"

	"example.com/cache-operator/engine/api"
	"example.com/cache-operator/engine/member"
	"example.com/cache-operator/engine/render"
)

// The credentials on the members: each member's default user accepts exactly the password hashes
// of the cache's Secret (the accepted one, and during a rotation's overlap the previous one), and
// its internal user has the Secret's internal password. Sync gives them live (ACL SETUSER), with
// no restart.

// Sync gives one member's server the credentials it does not have. Neither its log lines nor
// its errors carry a password or a hash.
func Sync(ctx context.Context, pod string, client *redis.Client, cred Credentials) error {
	logger := klog.FromContext(ctx).WithValues("member", pod)
	have, found, err := member.UserPasswords(ctx, client, api.InternalUser)
	if err != nil {
		return err
	}
	internalSet := false
	if want := []string{render.PasswordHash(cred.Internal)}; !found || !slices.Equal(have, want) {
		if err := member.SetUserPassword(ctx, client, api.InternalUser, cred.Internal); err != nil {
			return err
		}
		internalSet = true
		logger.Info("Internal user set on the member", "user", api.InternalUser)
	}
	if have, _, err = member.UserPasswords(ctx, client, "default"); err != nil {
		return err
	}
	if !slices.Equal(have, cred.Hashes) {
		if err := member.SetUserPasswordHashes(ctx, client, "default", cred.Hashes); err != nil {
			return err
		}
		logger.Info("Clients' passwords set on the member", "revision", cred.Revision, "accepted", len(cred.Hashes), "before", len(have))
	}
	user, err := member.ReplicationUser(ctx, client)
	if err != nil {
		return err
	}
	if user != api.InternalUser || internalSet {
		// (A new internal password: replication's masterauth follows it.)
		if err := member.SetReplicationAuth(ctx, client, api.InternalUser, cred.Internal); err != nil {
			return err
		}
		logger.Info("Replication set to authenticate as the internal user", "user", api.InternalUser)
	}
	return nil
}
