package dataplane

import (
	"context"
	"fmt"

	"k8s.io/klog/v2"

	"example.com/cache-operator/engine/api"
	"example.com/cache-operator/engine/cachetls"
	"example.com/cache-operator/engine/credentials"
	"example.com/cache-operator/engine/informers"
	"example.com/cache-operator/engine/member"
	"example.com/cache-operator/engine/roles"
)

// The certificates on the members of a TLS cache: the kubelet updates each member's mounted
// Secret when the reconcile renews it; the member pass then makes each server that still serves
// another certificate load its files again (member.ReloadTLS), with no restart, and checks with a
// fresh handshake that it serves the Secret's.

// tlsOf returns the cache's TLS material from its TLS Secret in the informer cache, parsed once per
// resourceVersion (false: no TLS Secret).
func (c *Controller) tlsOf(ns, name string, mem *roleMemory) (cachetls.Material, bool) {
	obj := c.informers.PackedChild(informers.Secret, ns, api.TLSSecretName(name))
	if obj == nil {
		return cachetls.Material{}, false
	}
	if obj.ResourceVersion != mem.tlsRV {
		mem.tls, mem.tlsOK = cachetls.Material{}, false
		if u, err := c.informers.Packer.Unpack(obj); err == nil {
			mem.tls, mem.tlsOK = cachetls.MaterialOf(u)
		}
		mem.tlsRV = obj.ResourceVersion
	}
	return mem.tls, mem.tlsOK
}

// withTLS is cred with the cache's TLS material, for dialling its TLS members.
func withTLS(cred credentials.Credentials, m cachetls.Material) credentials.Credentials {
	cred.TLS, cred.TLSKey = m.Client, m.Key
	return cred
}

// applyCertificates makes every TLS member that answered serve the Secret's certificate. A member
// is checked when the serial or the member changed since its last check, and every liveRecheck.
// A member that does not yet (the kubelet has not updated its volume) is tried again at the next
// pass, and logged at verbosity 2 meanwhile.
func (c *Controller) applyCertificates(ctx context.Context, members []roles.Member, mem *roleMemory, cred credentials.Credentials, m cachetls.Material) {
	if m.Serial == "" {
		return
	}
	if mem.tlsChecked == nil {
		mem.tlsChecked = memberChecks{}
	}
	mem.tlsChecked.sweep(members, m.Serial, func(*roles.Member) bool { return false },
		func(mb *roles.Member) error {
			if !mb.TLS {
				return nil
			}
			addr := c.addr(mb.IP)
			cfg := m.Client
			served, err := member.ServedSerial(ctx, addr, cfg)
			if err != nil || served == m.Serial {
				return err
			}
			if err := member.ReloadTLS(ctx, c.memberClient(*mb, cred)); err != nil {
				return err
			}
			if served, err = member.ServedSerial(ctx, addr, cfg); err != nil {
				return err
			}
			if served != m.Serial {
				return fmt.Errorf("member %s serves certificate %s, the Secret holds %s: its volume is not updated yet", mb.Name, served, m.Serial)
			}
			klog.FromContext(ctx).Info("Member loaded the renewed certificate", "member", mb.Name, "serial", m.Serial)
			return nil
		},
		func(mb *roles.Member, err error) {
			if err != nil {
				klog.FromContext(ctx).V(2).Info("Member does not serve the TLS Secret's certificate yet", "member", mb.Name, "err", err)
			}
		})
}

// applyReplicationMode makes every replica of a cache with TLS material reach the primary in the
// primary's mode (TLS or plain text): a member that starts follows the read-write Service in its
// own mode, which is the primary's except in a roll that turns TLS on or off. A replica is checked
// when the primary or its mode changed, while its link is down, and every liveRecheck.
func (c *Controller) applyReplicationMode(ctx context.Context, members []roles.Member, mem *roleMemory, cred credentials.Credentials) {
	p := roles.HealthyPrimary(members)
	if p == nil || cred.TLS == nil {
		return
	}
	if mem.modeChecked == nil {
		mem.modeChecked = memberChecks{}
	}
	key := fmt.Sprintf("%s/%v", p.Name, p.TLS)
	mem.modeChecked.sweep(members, key, func(m *roles.Member) bool { return !m.Repl.LinkUp },
		func(m *roles.Member) error {
			if m.Name == p.Name || m.IsPrimary() {
				return nil
			}
			changed, err := member.ReplicateOverTLS(ctx, c.memberClient(*m, cred), p.TLS)
			if changed {
				klog.FromContext(ctx).Info("Replica set to reach its primary in the primary's mode", "member", m.Name, "primary", p.Name, "tls", p.TLS)
			}
			return err
		},
		func(*roles.Member, error) {})
}
