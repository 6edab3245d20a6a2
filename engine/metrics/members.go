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
	// Cluster is a sharded cache's cluster as its members report it (nil: not sharded).
	Cluster *ClusterSample
}

// ClusterSample is a sharded cache's cluster: whether every member that answered says
// cluster_state:ok (and all answered), and how many of the 16,384 slots the primaries that
// answered serve.
type ClusterSample struct {
	StateOK     bool
	SlotsServed int
}

// MemberSample is one member's figures. A member the pass could not read (Up false) has only
// its up and role series.
type MemberSample struct {
	Member string
	// Shard is the member's shard in a sharded cache ("" otherwise: the label is then absent).
	Shard string
	Up    bool
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
	ClusterStateOK         = "cache_operator_cluster_state_ok"
	ClusterSlotsServed     = "cache_operator_cluster_slots_served"

	LabelNamespace = "namespace"
	LabelCache     = "cache"
	LabelMember    = "member"
	LabelShard     = "shard"
)

// The per-member series. Labels: namespace, cache, member, shard for a sharded cache's members,
// and role for the role series: no label per key or client, so a cache of n members adds a fixed
// number of series per member.
var (
	memberLabels     = []string{LabelNamespace, LabelCache, LabelMember}
	memberUpDesc     = memberDesc(MemberUp, "1 when the operator's last member pass read the member's server (INFO), else 0.")
	memberRoleDesc   = descPair{prometheus.NewDesc(MemberRole, roleHelp, append(memberLabels[:3:3], "role"), nil), prometheus.NewDesc(MemberRole, roleHelp, append(memberLabels[:3:3], LabelShard, "role"), nil)}
	memberOffsetDesc = memberDesc(MemberOffset, "The member's replication offset (master_repl_offset on the primary, slave_repl_offset on a replica).")
	memberLagDesc    = memberDesc(MemberLag, "How far the member is behind the primary's offset, in bytes (0 on the primary); absent when it is on another replication history or there is no primary.")
	memberLinkDesc   = memberDesc(MemberLinkUp, "On a replica: 1 when its link to the primary is up and no sync is in progress, else 0.")
	memberUsedDesc   = memberDesc(MemberMemoryUsed, "used_memory: the bytes the server's allocator holds.")
	memberMaxDesc    = memberDesc(MemberMemoryMax, "maxmemory: the limit the eviction policy keeps used memory under (0: none).")
	memberEvictDesc  = memberDesc(MemberEvictedKeys, "Keys evicted to stay under maxmemory since the server started.")
	memberExpireDesc = memberDesc(MemberExpiredKeys, "Keys removed on their expiry since the server started.")
	memberConnsDesc  = memberDesc(MemberConnectedClients, "Client connections, the operator's own included.")
	memberKeysDesc   = memberDesc(MemberKeys, "Keys in every database of the member.")
	lastFailoverDesc = prometheus.NewDesc(MemberLastFailover, "When the primary of the cache last changed (Unix seconds), on the series of the member that became primary; kind is failover (the primary was gone) or switchover (a planned handover). Kept in the cache's status.lastFailover.", []string{LabelNamespace, LabelCache, LabelMember, "kind"}, nil)
	clusterStateDesc = prometheus.NewDesc(ClusterStateOK, "A sharded cache: 1 when every member answered the operator's last pass and says cluster_state:ok, else 0.", []string{LabelNamespace, LabelCache}, nil)
	clusterSlotsDesc = prometheus.NewDesc(ClusterSlotsServed, "A sharded cache: how many of the 16384 hash slots the primaries that answered the operator's last pass serve.", []string{LabelNamespace, LabelCache}, nil)
)

const roleHelp = "The member's role as its server reports it: 1 on the series of its role (primary or replica), 0 on the other; both 0 while it cannot be read."

// descPair is one series' descriptions: for a primary/replica cache's members, and for a sharded
// cache's, with the shard label.
type descPair struct{ plain, sharded *prometheus.Desc }

func (d descPair) of(shard string) *prometheus.Desc {
	if shard != "" {
		return d.sharded
	}
	return d.plain
}

func memberDesc(name, help string) descPair {
	return descPair{prometheus.NewDesc(name, help, memberLabels, nil), prometheus.NewDesc(name, help, append(memberLabels[:3:3], LabelShard), nil)}
}

type memberCollector struct {
	samples func(yield func(CacheSample) bool)
}

// Describe describes nothing: the collector is unchecked, since a series has two label sets (a
// sharded cache's members carry shard), which the registry refuses among described descriptors;
// the gatherer still checks every metric it collects.
func (memberCollector) Describe(chan<- *prometheus.Desc) {}

// memberDescs are the descriptions of every series memberCollector makes (Names reads them).
func memberDescs() []*prometheus.Desc {
	out := []*prometheus.Desc{lastFailoverDesc, clusterStateDesc, clusterSlotsDesc}
	for _, d := range []descPair{memberUpDesc, memberRoleDesc, memberOffsetDesc, memberLagDesc, memberLinkDesc,
		memberUsedDesc, memberMaxDesc, memberEvictDesc, memberExpireDesc, memberConnsDesc, memberKeysDesc} {
		out = append(out, d.plain, d.sharded)
	}
	return out
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
	if !c.LastFailover.IsZero() {
		gauge(lastFailoverDesc, float64(c.LastFailover.Unix()), c.Namespace, c.Cache, c.LastFailoverTo, c.LastFailoverKind)
	}
	if cl := c.Cluster; cl != nil {
		gauge(clusterStateDesc, bool01(cl.StateOK), c.Namespace, c.Cache)
		gauge(clusterSlotsDesc, float64(cl.SlotsServed), c.Namespace, c.Cache)
	}
	for _, s := range c.Members {
		l := []string{c.Namespace, c.Cache, s.Member}
		if s.Shard != "" {
			l = append(l, s.Shard)
		}
		member := func(d descPair, v float64, extra ...string) {
			ch <- prometheus.MustNewConstMetric(d.of(s.Shard), prometheus.GaugeValue, v, append(l[:len(l):len(l)], extra...)...)
		}
		counter := func(d descPair, v float64) {
			ch <- prometheus.MustNewConstMetric(d.of(s.Shard), prometheus.CounterValue, v, l...)
		}
		member(memberUpDesc, bool01(s.Up))
		member(memberRoleDesc, bool01(s.Role == "primary"), "primary")
		member(memberRoleDesc, bool01(s.Role == "replica"), "replica")
		if !s.Up {
			continue
		}
		member(memberOffsetDesc, float64(s.Offset))
		if s.HasLag {
			member(memberLagDesc, float64(s.Lag))
		}
		if s.Role == "replica" {
			member(memberLinkDesc, bool01(s.LinkUp))
		}
		member(memberUsedDesc, float64(s.UsedMemory))
		member(memberMaxDesc, float64(s.MaxMemory))
		counter(memberEvictDesc, float64(s.EvictedKeys))
		counter(memberExpireDesc, float64(s.ExpiredKeys))
		member(memberConnsDesc, float64(s.Clients))
		member(memberKeysDesc, float64(s.Keys))
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
