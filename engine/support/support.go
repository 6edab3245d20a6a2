// Package support is the support matrix: the engine and version pairs a ManagedCache may ask for,
// their image repositories, and which changes between them the data survives. It is written here
// once; the CRD's validation rule, the admission webhook, the restore's check and the API
// page's table come from it (tests compare the CRD and docs/api.md with what this package generates).
package support

import (
	"fmt"
	"strings"
)

// Release is one engine version the operator runs.
type Release struct {
	// Engine is redis or valkey; Version is MAJOR.MINOR, the image tag.
	Engine, Version string
	// Repository is the image repository (the tag is Version).
	Repository string
	// RDB is the snapshot format version the release writes; a server loads formats up to its
	// own (Valkey 8 loads Redis formats up to 11, Redis 7.2's).
	RDB int
	// Cluster: it runs as a member of a sharded cache (cluster mode), with what the operator
	// drives it by: CLUSTER ADDSLOTSRANGE (7.0 on), MIGRATE ... AUTH2 ... KEYS, and
	// cluster-allow-replica-migration. No release here has atomic slot migration (Valkey 9):
	// slots move key by key.
	Cluster bool
}

// Releases are the supported pairs, oldest first within each engine. Redis before 7.0 lacks what
// the operator needs (multi-section INFO, ACL selectors such as &*).
var Releases = []Release{
	{Engine: "redis", Version: "7.0", Repository: "redis", RDB: 10, Cluster: true},
	{Engine: "redis", Version: "7.2", Repository: "redis", RDB: 11, Cluster: true},
	{Engine: "redis", Version: "8.0", Repository: "redis", RDB: 12, Cluster: true},
	{Engine: "valkey", Version: "8.0", Repository: "valkey/valkey", RDB: 11, Cluster: true},
	{Engine: "valkey", Version: "8.1", Repository: "valkey/valkey", RDB: 11, Cluster: true},
}

// Engines are the engine names, in the order of Releases.
func Engines() []string {
	var out []string
	for _, r := range Releases {
		if len(out) == 0 || out[len(out)-1] != r.Engine {
			out = append(out, r.Engine)
		}
	}
	return out
}

// Versions are the supported versions of engine.
func Versions(engine string) []string {
	var out []string
	for _, r := range Releases {
		if r.Engine == engine {
			out = append(out, r.Version)
		}
	}
	return out
}

// Find returns the release of engine and version (MAJOR.MINOR, or a full server version such as
// "7.0.15", of which MAJOR.MINOR is read).
func Find(engine, version string) (Release, bool) {
	version = majorMinor(version)
	for _, r := range Releases {
		if r.Engine == engine && r.Version == version {
			return r, true
		}
	}
	return Release{}, false
}

// Repositories maps each engine to its image repository.
func Repositories() map[string]string {
	out := map[string]string{}
	for _, r := range Releases {
		out[r.Engine] = r.Repository
	}
	return out
}

// Summary names the supported pairs: "redis 7.0, 7.2, 8.0; valkey 8.0, 8.1".
func Summary() string {
	var parts []string
	for _, e := range Engines() {
		parts = append(parts, e+" "+strings.Join(Versions(e), ", "))
	}
	return strings.Join(parts, "; ")
}

// Unsupported says why engine and version cannot be run, or is nil.
func Unsupported(engine, version string) error {
	if _, ok := Find(engine, version); ok && majorMinor(version) == version {
		return nil
	}
	return fmt.Errorf("%s %s is not supported; supported: %s", engine, version, Summary())
}

// ClusterRefusal says why engine and version cannot run a sharded cache, or "" (a pair not in the
// matrix is Unsupported's).
func ClusterRefusal(engine, version string) string {
	if r, ok := Find(engine, version); ok && !r.Cluster {
		return fmt.Sprintf("%s %s cannot run in cluster mode (a sharded cache)", r.Engine, r.Version)
	}
	return ""
}

// LoadRefusal says why a server of release to cannot load data written by fromEngine in snapshot
// format fromRDB, or "".
func LoadRefusal(fromEngine string, fromRDB int, to Release) string {
	switch {
	case fromEngine == "valkey" && to.Engine == "redis":
		return "redis cannot load data written by valkey"
	case fromEngine == to.Engine && fromRDB > to.RDB:
		return fmt.Sprintf("%s %s reads snapshot formats up to %d and the data is in format %d", to.Engine, to.Version, to.RDB, fromRDB)
	case fromEngine == "redis" && to.Engine == "valkey" && fromRDB > 11:
		return fmt.Sprintf("valkey reads redis data up to redis 7.2's snapshot format (11) and the data is in format %d", fromRDB)
	}
	return ""
}

// ChangeRefusal says why a cache running from cannot change to to and keep its data, or "". A
// pair missing from the matrix is refused by Unsupported, not here; a from that is not in it (a
// cache created before the matrix) is judged by its major version alone.
func ChangeRefusal(fromEngine, fromVersion, toEngine, toVersion string) string {
	to, ok := Find(toEngine, toVersion)
	if !ok || (fromEngine == toEngine && fromVersion == toVersion) {
		return ""
	}
	from, ok := Find(fromEngine, fromVersion)
	if !ok {
		if fromEngine == toEngine && major(fromVersion) > major(toVersion) {
			return fmt.Sprintf("%s %s cannot read the data files of the newer major version %s", toEngine, toVersion, fromVersion)
		}
		if fromEngine == "valkey" && toEngine == "redis" {
			return "redis cannot load data written by valkey"
		}
		return ""
	}
	return LoadRefusal(from.Engine, from.RDB, to)
}

// CELRule is the CRD's validation rule on spec.engine (v2), and CELMessage its message.
func CELRule() string {
	var clauses []string
	for _, e := range Engines() {
		quoted := make([]string, 0)
		for _, v := range Versions(e) {
			quoted = append(quoted, "'"+v+"'")
		}
		clauses = append(clauses, fmt.Sprintf("(self.name == '%s' && self.version in [%s])", e, strings.Join(quoted, ", ")))
	}
	return strings.Join(clauses, " || ")
}

// CELMessage is the message of CELRule.
func CELMessage() string {
	return "unsupported engine and version; supported: " + Summary()
}

// MarkdownTable is the API page's table of the matrix (docs/api.md; the docs' test compares them).
func MarkdownTable() string {
	var b strings.Builder
	b.WriteString("| engine | version | image | snapshot format (RDB) | sharded (cluster mode) |\n|---|---|---|---|---|\n")
	for _, r := range Releases {
		cluster := "no"
		if r.Cluster {
			cluster = "yes"
		}
		fmt.Fprintf(&b, "| %s | %s | `%s:%s` | %d | %s |\n", r.Engine, r.Version, r.Repository, r.Version, r.RDB, cluster)
	}
	return b.String()
}

func majorMinor(v string) string {
	parts := strings.SplitN(v, ".", 3)
	if len(parts) < 2 {
		return v
	}
	return parts[0] + "." + parts[1]
}

func major(v string) int {
	n := 0
	for _, c := range v {
		if c < '0' || c > '9' {
			break
		}
		n = n*10 + int(c-'0')
	}
	return n
}
