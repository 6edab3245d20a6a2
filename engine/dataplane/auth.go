package dataplane

import (
	"context"

	"github.com/redis/go-redis/v9"

	"example.com/cache-operator/engine/api"
	"example.com/cache-operator/engine/credentials"
	"example.com/cache-operator/engine/member"
	"example.com/cache-operator/engine/roles"
)

// The credentials on the members: the member pass gives every member whose server answers what the
// cache's Secret holds (credentials.Of) with the permissions of its ConfigMap (users.acl), through
// credentials.Sync, checked again every liveRecheck; then, once every member accepts the current
// internal password, replication's (credentials.SyncReplication).

// How a member the current internal password was refused by is reached (authFallback).
const (
	viaPreviousInternal = 1 // the internal user, with the previous internal password
	viaDefaultUser      = 2 // the default user, with the clients' password
)

// memberClient is the pooled client of member m: as the internal user, or as its fallback; over
// TLS when the member serves TLS.
func (c *Controller) memberClient(m roles.Member, cred credentials.Credentials) *redis.Client {
	addr := c.addr(m.IP)
	via, _ := c.authFallback.Load(addr)
	cfg, key := cred.TLS, cred.TLSKey
	if !m.TLS {
		cfg, key = nil, ""
	}
	switch {
	case cred.Internal == "" || via == viaDefaultUser:
		return c.pool.ClientTLS(addr, "", cred.Password, cfg, key)
	case via == viaPreviousInternal && cred.PreviousInternal != "":
		return c.pool.ClientTLS(addr, api.InternalUser, cred.PreviousInternal, cfg, key)
	}
	return c.pool.ClientTLS(addr, api.InternalUser, cred.Internal, cfg, key)
}

// fallBack moves the member at ip to its next fallback after its credentials were refused: the
// previous internal password (during an internal rotation's overlap), then the default user;
// false when there is none left, so that nothing is retried.
func (c *Controller) fallBack(ip string, cred credentials.Credentials) bool {
	if cred.Internal == "" {
		return false
	}
	addr := c.addr(ip)
	via, _ := c.authFallback.Load(addr)
	next := viaPreviousInternal
	if via == viaPreviousInternal || cred.PreviousInternal == "" {
		next = viaDefaultUser
	}
	if via == viaDefaultUser || (next == viaDefaultUser && cred.Password == "") {
		return false
	}
	c.authFallback.Store(addr, next)
	return true
}

// applyAuth gives every member whose server answered the Secret's credentials with the
// ConfigMap's permissions (rules; no Users: permissions left as they are): the internal user with
// its passwords, the default user with exactly the accepted hashes. A member is read when the
// credentials, the rules or the member (its pod UID) changed since its last check, and every
// liveRecheck. It sets each member's PasswordRevision once its server has them, AuthError when it
// could not be given them. When every member that answered has them, replication follows the
// current internal password.
func (c *Controller) applyAuth(ctx context.Context, members []roles.Member, mem *roleMemory, cred credentials.Credentials, rules credentials.Rules) {
	if cred.Revision == 0 || cred.Internal == "" {
		return // the reconcile has not yet written the Secret's keys
	}
	if mem.authChecked == nil {
		mem.authChecked = memberChecks{}
	}
	if mem.replChecked == nil {
		mem.replChecked = memberChecks{}
	}
	fallenBack := func(m *roles.Member) bool { _, ok := c.authFallback.Load(c.addr(m.IP)); return ok }
	all := true
	mem.authChecked.sweep(members, cred.Key+"/"+rules.Key, fallenBack,
		func(m *roles.Member) error {
			return credentials.Sync(ctx, m.Name, c.memberClient(*m, cred), cred, rules)
		},
		func(m *roles.Member, err error) {
			if err != nil {
				m.AuthError, all = err.Error(), false
				if member.IsRefused(err) && fallenBack(m) {
					// Reached through a fallback that may not run admin commands (the clients'
					// user answers NOPERM): the next pass tries the current internal password
					// again, which a member restarted since (its probes read the Secret) accepts.
					c.authFallback.Delete(c.addr(m.IP))
				}
				return
			}
			c.authFallback.Delete(c.addr(m.IP))
			m.PasswordRevision = cred.Revision
		})
	if !all {
		return
	}
	mem.replChecked.sweep(members, cred.Key, func(*roles.Member) bool { return false },
		func(m *roles.Member) error {
			return credentials.SyncReplication(ctx, m.Name, c.memberClient(*m, cred), cred)
		},
		func(m *roles.Member, err error) {
			if err != nil {
				m.AuthError = err.Error()
			}
		})
}
