package credentials

import (
	"context"
	"fmt"
	"hash/fnv"
	"slices"
	"strconv"
	"strings"
	"sync"

	"github.com/redis/go-redis/v9"
	"k8s.io/klog/v2"

	"example.com/cache-operator/engine/api"
	"example.com/cache-operator/engine/member"
	"example.com/cache-operator/engine/render"
)

// The credentials on the members: each member's default user accepts exactly the password hashes
// of the cache's Secret (the accepted one, and during a rotation's overlap the previous one), its
// internal user the Secret's internal password (and during an internal rotation's overlap the
// previous one), each with the permissions of the ConfigMap's users.acl. Sync gives them live (ACL
// SETUSER), with no restart; SyncReplication then moves replication to the current internal
// password, once every member accepts it.

// Rules are the server users' permissions, from a cache's ConfigMap (api.UsersConfigKey): user
// name to ACL rules.
type Rules struct {
	Users map[string]string
	// Key digests them.
	Key string
}

// ParseRules reads the ConfigMap's users.acl: one line per user, "<user> <rules>". Both the
// default and the internal user must have a line. A rule that would set a password or switch a
// user on or off is refused: passwords come from the Secret alone.
func ParseRules(text string) (Rules, error) {
	r := Rules{Users: map[string]string{}}
	for i, line := range strings.Split(text, "\n") {
		line = strings.TrimSpace(line)
		if line == "" {
			continue
		}
		user, rules, _ := strings.Cut(line, " ")
		if _, dup := r.Users[user]; dup {
			return Rules{}, fmt.Errorf("%s line %d: a second line for the user %q", api.UsersConfigKey, i+1, user)
		}
		for _, tok := range strings.Fields(rules) {
			switch t := strings.ToLower(tok); {
			case strings.ContainsAny(t[:1], "><#!"), t == "nopass", t == "resetpass", t == "reset", t == "on", t == "off":
				return Rules{}, fmt.Errorf("%s line %d: the rule %q of the user %q is about passwords or switching the user; the Secret decides those", api.UsersConfigKey, i+1, tok, user)
			}
		}
		r.Users[user] = strings.Join(strings.Fields(rules), " ")
	}
	for _, u := range []string{"default", api.InternalUser} {
		if r.Users[u] == "" {
			return Rules{}, fmt.Errorf("%s has no rules for the user %q", api.UsersConfigKey, u)
		}
	}
	h := fnv.New64a()
	_, _ = h.Write([]byte(text))
	r.Key = strconv.FormatUint(h.Sum64(), 16)
	return r, nil
}

// normalized remembers, per user and rules, the permissions a server read back after it was
// given them (ACL GETUSER normalizes what ACL SETUSER took): a member that reads back the same
// has them, with no need to set them again.
var normalized sync.Map // user + "\x00" + rules -> member.User.Permissions

// Sync gives one member's server the users it does not have: the internal user first (the
// operator may be reaching the member as the default user, which the default's rules then take
// admin from), then the default user. rules.Users nil: permissions are left as they are (a
// ConfigMap not yet written). Neither its log lines nor its errors carry a password or a hash.
func Sync(ctx context.Context, pod string, client *redis.Client, cred Credentials, rules Rules) error {
	logger := klog.FromContext(ctx).WithValues("member", pod)
	internal := []string{">" + cred.Internal}
	internalHashes := []string{render.PasswordHash(cred.Internal)}
	if cred.PreviousInternal != "" {
		internal = append(internal, ">"+cred.PreviousInternal)
		internalHashes = append(internalHashes, render.PasswordHash(cred.PreviousInternal))
	}
	slices.Sort(internalHashes)
	changed, err := syncUser(ctx, client, api.InternalUser, internal, internalHashes, rules)
	if err != nil {
		return err
	}
	if changed != "" {
		logger.Info("Internal user set on the member", "user", api.InternalUser, "changed", changed, "passwords", len(internal))
	}
	def := make([]string, len(cred.Hashes))
	for i, h := range cred.Hashes {
		def[i] = "#" + h
	}
	if changed, err = syncUser(ctx, client, "default", def, cred.Hashes, rules); err != nil {
		return err
	}
	if changed != "" {
		logger.Info("Clients' user set on the member", "changed", changed, "revision", cred.Revision, "accepted", len(cred.Hashes))
	}
	return nil
}

// syncUser gives one user its passwords and rules if the server's differ; it says what it changed
// ("": nothing).
func syncUser(ctx context.Context, client *redis.Client, user string, passwords, hashes []string, rules Rules) (string, error) {
	have, found, err := member.GetUser(ctx, client, user)
	if err != nil {
		return "", err
	}
	want, known := rules.Users[user]
	var setPasswords []string
	var what []string
	if !found || !slices.Equal(have.Passwords, hashes) {
		setPasswords = passwords
		what = append(what, "passwords")
	}
	key := user + "\x00" + want
	setRules := ""
	switch {
	case known:
		if seen, ok := normalized.Load(key); !found || !ok || seen != have.Permissions {
			setRules = want
			what = append(what, "permissions")
		}
	case !found:
		// No rules known yet and no such user (a member of an older operator): every
		// permission, as that operator gave it, until the ConfigMap's rules arrive.
		setRules = "~* &* +@all"
		what = append(what, "permissions")
	}
	if len(what) == 0 {
		return "", nil
	}
	if err := member.SetUser(ctx, client, user, setPasswords, setRules); err != nil {
		return "", err
	}
	if known && setRules != "" {
		if now, found, err := member.GetUser(ctx, client, user); err == nil && found {
			normalized.Store(key, now.Permissions)
		}
	}
	return strings.Join(what, ", "), nil
}

// SyncReplication makes a member authenticate to its primary as the internal user with the
// current internal password, if it does not. The caller makes sure every member accepts that
// password first (Sync), so that no link is refused meanwhile.
func SyncReplication(ctx context.Context, pod string, client *redis.Client, cred Credentials) error {
	user, password, err := member.ReplicationAuth(ctx, client)
	if err != nil {
		return err
	}
	if user == api.InternalUser && password == cred.Internal {
		return nil
	}
	if err := member.SetReplicationAuth(ctx, client, api.InternalUser, cred.Internal); err != nil {
		return err
	}
	klog.FromContext(ctx).Info("Replication set to authenticate with the current internal password", "member", pod, "user", api.InternalUser)
	return nil
}
