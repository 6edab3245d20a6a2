package metrics

import (
	"regexp"
	"slices"
	"sync"

	"github.com/prometheus/client_golang/prometheus"
)

var (
	registeredMu sync.Mutex
	registered   []prometheus.Collector
)

// register adds collectors to Registry and remembers them for Names.
func register(cs ...prometheus.Collector) {
	Registry.MustRegister(cs...)
	registeredMu.Lock()
	defer registeredMu.Unlock()
	registered = append(registered, cs...)
}

var fqName = regexp.MustCompile(`fqName: "([^"]+)"`)

// Names returns the name of every metric family the operator exports, those registered only once
// the controllers start included (the caches by Ready, the per-member series), sorted: what the
// dashboards' and alerts' queries are checked against. A histogram's series add _bucket, _sum and
// _count to its name.
func Names() []string {
	registeredMu.Lock()
	cs := append(slices.Clone(registered), fleetCollector{})
	registeredMu.Unlock()
	ch := make(chan *prometheus.Desc)
	go func() {
		for _, c := range cs {
			c.Describe(ch)
		}
		for _, d := range memberDescs() { // an unchecked collector's
			ch <- d
		}
		close(ch)
	}()
	seen := map[string]bool{}
	for d := range ch {
		if m := fqName.FindStringSubmatch(d.String()); m != nil {
			seen[m[1]] = true
		}
	}
	out := make([]string, 0, len(seen))
	for n := range seen {
		out = append(out, n)
	}
	slices.Sort(out)
	return out
}
