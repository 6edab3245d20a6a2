package member

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"strings"

	"github.com/redis/go-redis/v9"
)

// IsAuthError reports whether err is the server refusing a client's credentials (a wrong
// password, an unknown user, or none given where one is required).
func IsAuthError(err error) bool {
	if err == nil {
		return false
	}
	s := err.Error()
	return strings.Contains(s, "WRONGPASS") || strings.Contains(s, "NOAUTH") || strings.Contains(s, "invalid username-password pair")
}

// IsRefused reports whether err is a member refusing the operator: its credentials (IsAuthError)
// or the permission to run a command (NOPERM).
func IsRefused(err error) bool {
	return IsAuthError(err) || (err != nil && strings.Contains(err.Error(), "NOPERM"))
}

// User is a server user as ACL GETUSER reports it.
type User struct {
	// Passwords are the SHA-256 hashes (hex, sorted) of its passwords.
	Passwords []string
	// Permissions are its commands, keys and channels as the server normalizes them, the words
	// sorted (a server lists single commands in no fixed order): the same rules read back the
	// same on one server version.
	Permissions string
}

// GetUser reads a server user (found is false when the server has no such user).
func GetUser(ctx context.Context, c *redis.Client, user string) (u User, found bool, err error) {
	ctx, cancel := bounded(ctx)
	defer cancel()
	reply, err := c.Do(ctx, "ACL", "GETUSER", user).Result()
	if errors.Is(err, redis.Nil) {
		return User{}, false, nil
	}
	if err != nil {
		return User{}, false, fmt.Errorf("member %s: ACL GETUSER %s: %w", c.Options().Addr, user, err)
	}
	fields, err := replyFields(reply)
	if err != nil {
		return User{}, false, fmt.Errorf("member %s: ACL GETUSER %s: %w", c.Options().Addr, user, err)
	}
	list, _ := fields["passwords"].([]interface{})
	for _, h := range list {
		if s, ok := h.(string); ok {
			u.Passwords = append(u.Passwords, s)
		}
	}
	sort.Strings(u.Passwords)
	words := strings.Fields(fmt.Sprintf("%v %v %v %v", fields["commands"], fields["keys"], fields["channels"], fields["selectors"]))
	sort.Strings(words)
	u.Permissions = strings.Join(words, " ")
	return u, true, nil
}

// replyFields reads a map reply: a RESP3 map, or a RESP2 array of names and values.
func replyFields(reply interface{}) (map[string]interface{}, error) {
	switch r := reply.(type) {
	case map[interface{}]interface{}:
		out := make(map[string]interface{}, len(r))
		for k, v := range r {
			out[fmt.Sprint(k)] = v
		}
		return out, nil
	case []interface{}:
		out := make(map[string]interface{}, len(r)/2)
		for i := 0; i+1 < len(r); i += 2 {
			out[fmt.Sprint(r[i])] = r[i+1]
		}
		return out, nil
	}
	return nil, fmt.Errorf("unexpected reply %T", reply)
}

// SetUser turns user on with exactly the given passwords, each ">password" or "#sha256-hex"
// (none given: its passwords are left as they are), and then the ACL rules (space-separated, ""
// for none), in one ACL SETUSER: the user is never without a password, and a change of
// permissions is atomic. Connections already authenticated stay so.
func SetUser(ctx context.Context, c *redis.Client, user string, passwords []string, rules string) error {
	args := []interface{}{"ACL", "SETUSER", user, "on"}
	if len(passwords) > 0 {
		args = append(args, "resetpass")
		for _, p := range passwords {
			args = append(args, p)
		}
	}
	for _, r := range strings.Fields(rules) {
		args = append(args, r)
	}
	return setUser(ctx, c, user, args)
}

// setUser runs an ACL SETUSER. Its error names the command and the user only: the server's
// message may quote the arguments, passwords among them.
func setUser(ctx context.Context, c *redis.Client, user string, args []interface{}) error {
	ctx, cancel := bounded(ctx)
	defer cancel()
	if err := c.Do(ctx, args...).Err(); err != nil {
		msg := "refused"
		if IsAuthError(err) {
			msg = "not authenticated"
		} else if errors.Is(err, context.DeadlineExceeded) || strings.Contains(err.Error(), "timeout") {
			msg = "timed out"
		}
		return fmt.Errorf("member %s: ACL SETUSER %s: %s", c.Options().Addr, user, msg)
	}
	return nil
}

// ReplicationAuth returns the user and password a member authenticates with to its primary
// (CONFIG GET masteruser masterauth; user "" for the default user).
func ReplicationAuth(ctx context.Context, c *redis.Client) (user, password string, err error) {
	ctx, cancel := bounded(ctx)
	defer cancel()
	m, err := c.ConfigGet(ctx, "master*").Result()
	if err != nil {
		return "", "", fmt.Errorf("member %s: CONFIG GET master*: %w", c.Options().Addr, err)
	}
	return m["masteruser"], m["masterauth"], nil
}

// SetReplicationAuth makes a member authenticate to its primary as user with password (CONFIG SET
// masteruser masterauth, one command). A link already up stays up; the next one uses them.
func SetReplicationAuth(ctx context.Context, c *redis.Client, user, password string) error {
	ctx, cancel := bounded(ctx)
	defer cancel()
	if err := c.Do(ctx, "CONFIG", "SET", "masteruser", user, "masterauth", password).Err(); err != nil {
		return fmt.Errorf("member %s: CONFIG SET masteruser masterauth: refused", c.Options().Addr)
	}
	return nil
}
