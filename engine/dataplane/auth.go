package dataplane

import (
	"context"

	"github.com/redis/go-redis/v9"

	"example.com/cache-operator/engine/api"
	"example.com/cache-operator/engine/credentials"
	"example.com/cache-operator/engine/roles"
)

// The credentials on the members: the member pass gives every member whose server answers what the
// cache's Secret holds (credentials.Of), through credentials.Sync, checked again every liveRecheck.

// memberClient is the pooled client of the member at ip: as the internal user, or as the default
// user with the clients' password for a member that has no internal user yet (fallBack).
func (c *Controller) memberClient(ip string, cred credentials.Credentials) *redis.Client {
	addr := c.addr(ip)
	if _, legacy := c.authFallback.Load(addr); cred.Internal == "" || legacy {
		return c.pool.Client(addr, cred.Password)
	}
	return c.pool.ClientAs(addr, api.InternalUser, cred.Internal)
}

// fallBack marks the member at ip to be reached as the default user, after the internal user was
// refused; false if it already was (or there is no internal password), so nothing is retried.
func (c *Controller) fallBack(ip string, cred credentials.Credentials) bool {
	if cred.Internal == "" || cred.Password == "" {
		return false
	}
	_, already := c.authFallback.LoadOrStore(c.addr(ip), true)
	return !already
}

// applyAuth gives every member whose server answered the Secret's credentials: the internal user
// with its password, the default user with exactly the accepted hashes, replication as the
// internal user. A member is read when the credentials or the member (its pod UID) changed since
// its last check, and every liveRecheck. It sets each member's PasswordRevision once its server
// has them, AuthError when it could not be given them.
func (c *Controller) applyAuth(ctx context.Context, members []roles.Member, mem *roleMemory, cred credentials.Credentials) {
	if cred.Revision == 0 || cred.Internal == "" {
		return // the reconcile has not yet written the Secret's keys
	}
	if mem.authChecked == nil {
		mem.authChecked = memberChecks{}
	}
	fallenBack := func(m *roles.Member) bool { _, ok := c.authFallback.Load(c.addr(m.IP)); return ok }
	mem.authChecked.sweep(members, cred.Key, fallenBack,
		func(m *roles.Member) error { return credentials.Sync(ctx, m.Name, c.memberClient(m.IP, cred), cred) },
		func(m *roles.Member, err error) {
			if err != nil {
				m.AuthError = err.Error()
				return
			}
			c.authFallback.Delete(c.addr(m.IP))
			m.PasswordRevision = cred.Revision
		})
}
