package member

import (
	"context"
	"fmt"
	"strings"

	"github.com/redis/go-redis/v9"
)

// readOnly are the commands (lower case, with the subcommand where the command has them) that
// change nothing on a member: the operator sends them whether or not it leads. Every other
// command (REPLICAOF, FAILOVER, CLIENT PAUSE, CLIENT KILL, CONFIG SET, ACL SETUSER, ...) passes
// the pool's guard first.
var readOnly = map[string]bool{
	"info": true, "ping": true, "role": true, "config get": true, "acl getuser": true, "acl whoami": true,
	"auth": true, "hello": true, "client setinfo": true, "client setname": true, "client list": true,
	"client info": true, "select": true,
}

// commandName is a command's name, with its subcommand for the container commands above.
func commandName(cmd redis.Cmder) string {
	args := cmd.Args()
	name := strings.ToLower(cmd.Name())
	switch name {
	case "config", "acl", "client":
		if len(args) > 1 {
			return name + " " + strings.ToLower(fmt.Sprint(args[1]))
		}
	}
	return name
}

// Mutates reports whether cmd may change a member (anything but the read-only commands).
func Mutates(cmd redis.Cmder) bool { return !readOnly[commandName(cmd)] }

// guardHook asks guard before every command that changes a member, in one call or a pipeline:
// the lease fence of the operator's API writes, for its Redis commands. A process paused past its
// lease wakes up with member passes in the middle of a failover; none of their role changes,
// settings or users reaches a member once guard refuses.
type guardHook struct{ guard func() error }

func (guardHook) DialHook(next redis.DialHook) redis.DialHook { return next }

func (h guardHook) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		if Mutates(cmd) {
			if err := h.guard(); err != nil {
				err = fmt.Errorf("%s refused: %w", strings.ToUpper(commandName(cmd)), err)
				cmd.SetErr(err)
				return err
			}
		}
		return next(ctx, cmd)
	}
}

func (h guardHook) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		for _, cmd := range cmds {
			if Mutates(cmd) {
				if err := h.guard(); err != nil {
					err = fmt.Errorf("%s refused: %w", strings.ToUpper(commandName(cmd)), err)
					for _, c := range cmds {
						c.SetErr(err)
					}
					return err
				}
			}
		}
		return next(ctx, cmds)
	}
}

var _ redis.Hook = guardHook{}
