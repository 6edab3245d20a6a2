package dataplane

import (
	"context"
	"fmt"
	"hash/fnv"
	"strings"

	"github.com/redis/go-redis/v9"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/klog/v2"

	"example.com/cache-operator/engine/api"
	"example.com/cache-operator/engine/credentials"
	"example.com/cache-operator/engine/informers"
	"example.com/cache-operator/engine/member"
	"example.com/cache-operator/engine/metrics"
	"example.com/cache-operator/engine/roles"
)

// liveSettings are the settings of a cache's ConfigMap (api.LiveConfigKey), parsed.
type liveSettings struct {
	values   map[string]string
	names    []string
	revision string // a digest of the text
	err      error  // the text does not parse
	// users are the users' permissions (api.UsersConfigKey); usersErr says why they do not parse.
	users    credentials.Rules
	usersErr error
}

// liveSettingsOf returns the cache's live settings from its ConfigMap in the informer cache,
// decoded and parsed once per resourceVersion (false: no ConfigMap yet).
func (c *Controller) liveSettingsOf(ns, name string, mem *roleMemory) (liveSettings, bool) {
	obj := c.informers.PackedChild(informers.ConfigMap, ns, api.ConfigName(name))
	if obj == nil {
		return liveSettings{}, false
	}
	if obj.ResourceVersion != mem.liveRV {
		var ls liveSettings
		if u, err := c.informers.Packer.Unpack(obj); err != nil {
			ls.err = err
		} else {
			text, _, _ := unstructured.NestedString(u.Object, "data", api.LiveConfigKey)
			ls.values, ls.names, ls.err = member.ParseSettings(text)
			h := fnv.New32a()
			_, _ = h.Write([]byte(text))
			ls.revision = fmt.Sprintf("%08x", h.Sum32())
			if users, ok, _ := unstructured.NestedString(u.Object, "data", api.UsersConfigKey); ok {
				ls.users, ls.usersErr = credentials.ParseRules(users)
			}
		}
		mem.liveRV, mem.live = obj.ResourceVersion, ls
	}
	return mem.live, true
}

// applyLiveSettings brings every member whose server answered to the live settings: it reads them
// (CONFIG GET) and sets those that differ (CONFIG SET), with no restart. A member is read when the
// settings or the member (its pod UID) changed since its last check, and every liveRecheck. It
// sets each member's ConfigRevision when its server has the settings, ConfigError when it could
// not be given them.
func (c *Controller) applyLiveSettings(ctx context.Context, members []roles.Member, mem *roleMemory, ls liveSettings, cred credentials.Credentials) {
	if mem.liveChecked == nil {
		mem.liveChecked = memberChecks{}
	}
	mem.liveChecked.sweep(members, ls.revision, func(*roles.Member) bool { return false },
		func(m *roles.Member) error { return c.syncSettings(ctx, m.Name, c.memberClient(*m, cred), ls) },
		func(m *roles.Member, err error) {
			if err != nil {
				m.ConfigError = err.Error()
				return
			}
			m.ConfigRevision = ls.revision
		})
}

// syncSettings gives one member's server the live settings it does not have.
func (c *Controller) syncSettings(ctx context.Context, pod string, client *redis.Client, ls liveSettings) error {
	have, err := member.Settings(ctx, client, ls.names)
	if err != nil {
		return err
	}
	var differ []string
	for _, n := range ls.names {
		if have[n] != ls.values[n] {
			differ = append(differ, n)
		}
	}
	if len(differ) == 0 {
		return nil
	}
	if err := member.ApplySettings(ctx, client, differ, ls.values); err != nil {
		return err
	}
	changed := make([]string, 0, len(differ))
	for _, n := range differ {
		changed = append(changed, fmt.Sprintf("%s %s (was %s)", n, ls.values[n], have[n]))
	}
	klog.FromContext(ctx).Info("Applied live settings", "member", pod, "revision", ls.revision, "settings", strings.Join(changed, ", "))
	metrics.LiveSettingsApplied(len(differ))
	return nil
}
