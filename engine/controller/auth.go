package controller

// The clients' password on the members: each member's default user accepts exactly the password
// hashes of the cache's Secret (the accepted one, and during a rotation's overlap the previous
// one), and its internal user, which the operator, the probes and replication use, has the
// Secret's internal password. The reconcile decides the Secret (password.go); the member pass
// gives the members what it holds, live (ACL SETUSER), with no restart.

import (
	"context"
	"fmt"
	"hash/fnv"
	"slices"
	"strconv"
	"time"

	"github.com/redis/go-redis/v9"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/klog/v2"

	"example.com/cache-operator/engine/api"
	"example.com/cache-operator/engine/member"
	"example.com/cache-operator/engine/render"
)

// DefaultPasswordOverlap is how long the previous clients' password is still accepted after a
// rotation when no flag says otherwise: long enough for clients that read the Secret at start to
// be restarted by their owners, short enough that a leaked password dies soon.
const DefaultPasswordOverlap = 10 * time.Minute

// credentials are what a member pass reads from the cache's Secret.
type credentials struct {
	password string // the clients' password (the fallback to reach an older operator's member)
	internal string // the internal user's password
	// hashes are the SHA-256 of the passwords the default user is to accept, sorted.
	hashes   []string
	revision int64
	// key digests the above, so that a member found current is not read again for it.
	key string
}

// credentialsOf reads a cache's live Secret (false: none yet).
func credentialsOf(secret *unstructured.Unstructured) (credentials, bool) {
	if secret == nil {
		return credentials{}, false
	}
	cr := credentials{password: passwordFrom(secret), internal: secretValue(secret, api.InternalPasswordKey)}
	if !isHex(cr.internal, 2*passwordBytes) {
		cr.internal = "" // not yet written by this operator: reach members as the default user
	}
	if h := secretValue(secret, api.PasswordHashKey); isHex(h, 64) {
		cr.hashes = append(cr.hashes, h)
		if p := secretValue(secret, api.PreviousPasswordHashKey); isHex(p, 64) && p != h {
			cr.hashes = append(cr.hashes, p)
		}
		slices.Sort(cr.hashes)
		cr.revision, _ = strconv.ParseInt(secret.GetAnnotations()[api.PasswordRevisionAnnotation], 10, 64)
	}
	if cr.password == "" && cr.internal == "" {
		return cr, false
	}
	h := fnv.New64a()
	for _, s := range append([]string{cr.internal, strconv.FormatInt(cr.revision, 10)}, cr.hashes...) {
		_, _ = h.Write([]byte(s))
		_, _ = h.Write([]byte{0})
	}
	cr.key = strconv.FormatUint(h.Sum64(), 16)
	return cr, true
}

// memberClient is the pooled client of the member at ip: as the internal user, or as the default
// user with the clients' password for a member that has no internal user yet (fallBack).
func (c *Controller) memberClient(ip string, cred credentials) *redis.Client {
	addr := c.addr(ip)
	if _, legacy := c.authFallback.Load(addr); cred.internal == "" || legacy {
		return c.pool.Client(addr, cred.password)
	}
	return c.pool.ClientAs(addr, api.InternalUser, cred.internal)
}

// fallBack marks the member at ip to be reached as the default user, after the internal user was
// refused; false if it already was (or there is no internal password), so nothing is retried.
func (c *Controller) fallBack(ip string, cred credentials) bool {
	if cred.internal == "" || cred.password == "" {
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
func (c *Controller) applyAuth(ctx context.Context, members []memberState, mem *roleMemory, cred credentials) {
	if cred.revision == 0 || cred.internal == "" {
		return // the reconcile has not yet written the Secret's keys
	}
	if mem.authChecked == nil {
		mem.authChecked = memberChecks{}
	}
	fallenBack := func(m *memberState) bool { _, ok := c.authFallback.Load(c.addr(m.IP)); return ok }
	mem.authChecked.sweep(members, cred.key, fallenBack,
		func(m *memberState) error { return c.syncAuth(ctx, m.Name, c.memberClient(m.IP, cred), cred) },
		func(m *memberState, err error) {
			if err != nil {
				m.AuthError = err.Error()
				return
			}
			c.authFallback.Delete(c.addr(m.IP))
			m.PasswordRevision = cred.revision
		})
}

// syncAuth gives one member's server the credentials it does not have. Neither its log lines nor
// its errors carry a password or a hash.
func (c *Controller) syncAuth(ctx context.Context, pod string, client *redis.Client, cred credentials) error {
	logger := klog.FromContext(ctx).WithValues("member", pod)
	have, found, err := member.UserPasswords(ctx, client, api.InternalUser)
	if err != nil {
		return err
	}
	internalSet := false
	if want := []string{render.PasswordHash(cred.internal)}; !found || !slices.Equal(have, want) {
		if err := member.SetUserPassword(ctx, client, api.InternalUser, cred.internal); err != nil {
			return err
		}
		internalSet = true
		logger.Info("Internal user set on the member", "user", api.InternalUser)
	}
	if have, _, err = member.UserPasswords(ctx, client, "default"); err != nil {
		return err
	}
	if !slices.Equal(have, cred.hashes) {
		if err := member.SetUserPasswordHashes(ctx, client, "default", cred.hashes); err != nil {
			return err
		}
		logger.Info("Clients' passwords set on the member", "revision", cred.revision, "accepted", len(cred.hashes), "before", len(have))
	}
	user, err := member.ReplicationUser(ctx, client)
	if err != nil {
		return err
	}
	if user != api.InternalUser || internalSet {
		// (A new internal password: replication's masterauth follows it.)
		if err := member.SetReplicationAuth(ctx, client, api.InternalUser, cred.internal); err != nil {
			return err
		}
		logger.Info("Replication set to authenticate as the internal user", "user", api.InternalUser)
	}
	return nil
}

// ConditionPasswordApplied says whether every member accepts the Secret's password.
const ConditionPasswordApplied = "PasswordApplied"

// Reasons of the PasswordApplied condition, and of the rotation's Events.
const (
	ReasonPasswordApplied  = "PasswordApplied"
	ReasonPasswordPending  = "PasswordPending"
	ReasonPasswordRejected = "PasswordRejected"
	ReasonPasswordRotated  = "PasswordRotated"
)

// applyPasswordCondition sets PasswordApplied: False when the Secret's password was refused (the
// members keep the accepted one), else from the member pass: True when every member accepts the
// password of the current revision (and, during an overlap, the previous one), False naming those
// that do not yet.
func applyPasswordCondition(s *cacheStatus, v memberView, viewOK bool, d authDecision, generation int64) {
	cond := metav1.Condition{Type: ConditionPasswordApplied, ObservedGeneration: generation}
	switch {
	case d.rejected != "":
		cond.Status, cond.Reason = metav1.ConditionFalse, ReasonPasswordRejected
		cond.Message = fmt.Sprintf("%s; the members keep the password of revision %d", d.rejected, d.auth.Revision)
	case !viewOK || !v.Observed || v.Password == 0:
		if c := meta.FindStatusCondition(s.Conditions, ConditionPasswordApplied); c != nil && c.Reason == ReasonPasswordRejected {
			meta.RemoveStatusCondition(&s.Conditions, ConditionPasswordApplied)
		}
		return
	default:
		var pending []string
		for _, m := range v.Members {
			if m.PasswordRevision != v.Password {
				pending = append(pending, m.Name)
			}
		}
		if len(pending) == 0 {
			cond.Status, cond.Reason = metav1.ConditionTrue, ReasonPasswordApplied
			cond.Message = fmt.Sprintf("every member accepts the password of revision %d", v.Password)
			if d.auth.PreviousUntil != "" {
				cond.Message += " and, until " + d.auth.PreviousUntil + ", the previous one"
			}
		} else {
			cond.Status, cond.Reason = metav1.ConditionFalse, ReasonPasswordPending
			cond.Message = fmt.Sprintf("%v not yet at the password of revision %d", pending, v.Password)
			if v.PasswordPending != "" {
				cond.Message += " (" + v.PasswordPending + ")"
			}
		}
	}
	meta.SetStatusCondition(&s.Conditions, cond)
}
