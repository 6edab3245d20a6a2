package metrics

import (
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// CacheSample is what the last member pass of a cache read from its members' INFO: the source
// of the cache_operator_member_* series. Nothing here is read from the members for the metrics
// alone.
type CacheSample struct {
	Namespace, Cache string
	// LastFailover is when the primary last changed (a failover or a switchover; zero: never
	// seen), and LastFailoverTo the member that became primary.
	LastFailover   time.Time
	LastFailoverTo string
	// LastFailoverKind is failover (the primary was gone) or switchover (a planned handover).
	LastFailoverKind string
	Members          []MemberSample
}

// MemberSample is one member's figures. A member the pass could not read (Up false) has only
// its up and role series.
type MemberSample struct {
	Member string
	Up     bool
	// Role is primary, replica or unknown.
	Role string
	// Offset is the member's replication offset; Lag how far a replica is behind the primary in
	// bytes, HasLag false when that cannot be told (no primary, or another history).
	Offset, Lag int64
	HasLag      bool
	// LinkUp is a replica's link to its primary (primaries have no link series).
	LinkUp                                  bool
	UsedMemory, MaxMemory                   int64
	EvictedKeys, ExpiredKeys, Clients, Keys int64
}

// The per-member series' names and labels: the plugin reads them back from /metrics by these.
const (
	MemberUp               = "cache_operator_member_up"
	MemberRole             = "cache_operator_member_role"
	MemberOffset           = "cache_operator_member_replication_offset_bytes"
	MemberLag              = "cache_operator_member_replication_lag_bytes"
	MemberLinkUp           = "cache_operator_member_link_up"
	MemberMemoryUsed       = "cache_operator_member_memory_used_bytes"
	MemberMemoryMax        = "cache_operator_member_memory_max_bytes"
	MemberEvictedKeys      = "cache_operator_member_evicted_keys_total"
	MemberExpiredKeys      = "cache_operator_member_expired_keys_total"
	MemberConnectedClients = "cache_operator_member_connected_clients"
	MemberKeys             = "cache_operator_member_keys"
	MemberLastFailover     = "cache_operator_member_last_failover_timestamp_seconds"

	LabelNamespace = "namespace"
	LabelCache     = "cache"
	LabelMember    = "member"
)

// The per-member series. Labels: namespace, cache, member (and role for the role series): no
// label per key or client, so a cache of n members adds a fixed number of series per member.
var (
	memberLabels     = []string{LabelNamespace, LabelCache, LabelMember}
	memberUpDesc     = memberDesc(MemberUp, "1 when the operator's last member pass read the member's server (INFO), else 0.")
	memberRoleDesc   = prometheus.NewDesc(MemberRole, "The member's role as its server reports it: 1 on the series of its role (primary or replica), 0 on the other; both 0 while it cannot be read.", append(memberLabels[:3:3], "role"), nil)
	memberOffsetDesc = memberDesc(MemberOffset, "The member's replication offset (master_repl_offset on the primary, slave_repl_offset on a replica).")
	memberLagDesc    = memberDesc(MemberLag, "How far the member is behind the primary's offset, in bytes (0 on the primary); absent when it is on another replication history or there is no primary.")
	memberLinkDesc   = memberDesc(MemberLinkUp, "On a replica: 1 when its link to the primary is up and no sync is in progress, else 0.")
	memberUsedDesc   = memberDesc(MemberMemoryUsed, "used_memory: the bytes the server's allocator holds.")
	memberMaxDesc    = memberDesc(MemberMemoryMax, "maxmemory: the limit the eviction policy keeps used memory under (0: none).")
	memberEvictDesc  = memberDesc(MemberEvictedKeys, "Keys evicted to stay under maxmemory since the server started.")
	memberExpireDesc = memberDesc(MemberExpiredKeys, "Keys removed on their expiry since the server started.")
	memberConnsDesc  = memberDesc(MemberConnectedClients, "Client connections, the operator's own included.")
	memberKeysDesc   = memberDesc(MemberKeys, "Keys in every database of the member.")
	lastFailoverDesc = prometheus.NewDesc(MemberLastFailover, "When the primary of the cache last changed (Unix seconds), on the series of the member that became primary; kind is failover (the primary was gone) or switchover (a planned handover). Kept in the cache's status.lastFailover.", append(memberLabels[:3:3], "kind"), nil)
)

func memberDesc(name, help string) *prometheus.Desc {
	return prometheus.NewDesc(name, help, memberLabels, nil)
}

type memberCollector struct {
	samples func(yield func(CacheSample) bool)
}

func (memberCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{memberUpDesc, memberRoleDesc, memberOffsetDesc, memberLagDesc, memberLinkDesc,
		memberUsedDesc, memberMaxDesc, memberEvictDesc, memberExpireDesc, memberConnsDesc, memberKeysDesc, lastFailoverDesc} {
		ch <- d
	}
}

func (m memberCollector) Collect(ch chan<- prometheus.Metric) {
	m.samples(func(c CacheSample) bool {
		collectCache(ch, c)
		return true
	})
}

func collectCache(ch chan<- prometheus.Metric, c CacheSample) {
	gauge := func(d *prometheus.Desc, v float64, labels ...string) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.GaugeValue, v, labels...)
	}
	counter := func(d *prometheus.Desc, v float64, labels ...string) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.CounterValue, v, labels...)
	}
	if !c.LastFailover.IsZero() {
		gauge(lastFailoverDesc, float64(c.LastFailover.Unix()), c.Namespace, c.Cache, c.LastFailoverTo, c.LastFailoverKind)
	}
	for _, s := range c.Members {
		l := []string{c.Namespace, c.Cache, s.Member}
		gauge(memberUpDesc, bool01(s.Up), l...)
		gauge(memberRoleDesc, bool01(s.Role == "primary"), c.Namespace, c.Cache, s.Member, "primary")
		gauge(memberRoleDesc, bool01(s.Role == "replica"), c.Namespace, c.Cache, s.Member, "replica")
		if !s.Up {
			continue
		}
		gauge(memberOffsetDesc, float64(s.Offset), l...)
		if s.HasLag {
			gauge(memberLagDesc, float64(s.Lag), l...)
		}
		if s.Role == "replica" {
			gauge(memberLinkDesc, bool01(s.LinkUp), l...)
		}
		gauge(memberUsedDesc, float64(s.UsedMemory), l...)
		gauge(memberMaxDesc, float64(s.MaxMemory), l...)
		counter(memberEvictDesc, float64(s.EvictedKeys), l...)
		counter(memberExpireDesc, float64(s.ExpiredKeys), l...)
		gauge(memberConnsDesc, float64(s.Clients), l...)
		gauge(memberKeysDesc, float64(s.Keys), l...)
	}
}

func bool01(b bool) float64 {
	if b {
		return 1
	}
	return 0
}

var membersOnce sync.Once

// RegisterMembers exports the per-member series; samples yields every cache's last sample and is
// called at scrape time. Only the first call of the process registers.
func RegisterMembers(samples func(yield func(CacheSample) bool)) {
	membersOnce.Do(func() { register(memberCollector{samples: samples}) })
}
