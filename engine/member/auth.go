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

// UserPasswords returns the SHA-256 hashes (hex, sorted) of the passwords of a server user, as ACL
// GETUSER reports them; found is false when the server has no such user.
func UserPasswords(ctx context.Context, c *redis.Client, user string) (hashes []string, found bool, err error) {
	ctx, cancel := bounded(ctx)
	defer cancel()
	reply, err := c.Do(ctx, "ACL", "GETUSER", user).Result()
	if errors.Is(err, redis.Nil) {
		return nil, false, nil
	}
	if err != nil {
		return nil, false, fmt.Errorf("member %s: ACL GETUSER %s: %w", c.Options().Addr, user, err)
	}
	fields, err := replyFields(reply)
	if err != nil {
		return nil, false, fmt.Errorf("member %s: ACL GETUSER %s: %w", c.Options().Addr, user, err)
	}
	list, _ := fields["passwords"].([]interface{})
	for _, h := range list {
		if s, ok := h.(string); ok {
			hashes = append(hashes, s)
		}
	}
	sort.Strings(hashes)
	return hashes, true, nil
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

// SetUserPasswordHashes makes hashes (SHA-256, hex) the only passwords of user, which is on with
// every permission: ACL SETUSER user on resetpass #h... ~* &* +@all, one command, so the user is
// never without a password. Connections already authenticated stay so.
func SetUserPasswordHashes(ctx context.Context, c *redis.Client, user string, hashes []string) error {
	args := []interface{}{"ACL", "SETUSER", user, "on", "resetpass"}
	for _, h := range hashes {
		args = append(args, "#"+h)
	}
	return setUser(ctx, c, user, append(args, "~*", "&*", "+@all"))
}

// SetUserPassword makes password the only password of user, which is on with every permission.
func SetUserPassword(ctx context.Context, c *redis.Client, user, password string) error {
	return setUser(ctx, c, user, []interface{}{"ACL", "SETUSER", user, "on", "resetpass", ">" + password, "~*", "&*", "+@all"})
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

// ReplicationUser returns the user a member authenticates as to its primary (CONFIG GET
// masteruser; "" for the default user).
func ReplicationUser(ctx context.Context, c *redis.Client) (string, error) {
	ctx, cancel := bounded(ctx)
	defer cancel()
	m, err := c.ConfigGet(ctx, "masteruser").Result()
	if err != nil {
		return "", fmt.Errorf("member %s: CONFIG GET masteruser: %w", c.Options().Addr, err)
	}
	return m["masteruser"], nil
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
