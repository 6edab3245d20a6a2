package plugin

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"strings"
	"time"

	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"example.com/cache-operator/engine/metrics"
)

// figures are one member's series from the operator's /metrics (package metrics' Member* names).
type figures struct {
	up                                bool
	lag                               float64
	hasLag                            bool
	used, max, keys, clients, evicted float64
	linkUp                            float64
	hasLink                           bool
}

// memberFigures reads the per-member series of cache ns/name from the operator's leader; where
// says where they came from, or why there are none.
func (c *client) memberFigures(ctx context.Context, ns, name string) (map[string]*figures, string) {
	body, where, err := c.scrape(ctx)
	if err != nil {
		return nil, err.Error()
	}
	p := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := p.TextToMetricFamilies(strings.NewReader(body))
	if err != nil {
		return nil, fmt.Sprintf("the operator's metrics (%s) do not parse: %v", where, err)
	}
	// Each series this reads, by the name package metrics exports it under.
	set := map[string]func(*figures, float64){
		metrics.MemberUp:               func(f *figures, v float64) { f.up = v == 1 },
		metrics.MemberLag:              func(f *figures, v float64) { f.lag, f.hasLag = v, true },
		metrics.MemberMemoryUsed:       func(f *figures, v float64) { f.used = v },
		metrics.MemberMemoryMax:        func(f *figures, v float64) { f.max = v },
		metrics.MemberKeys:             func(f *figures, v float64) { f.keys = v },
		metrics.MemberConnectedClients: func(f *figures, v float64) { f.clients = v },
		metrics.MemberEvictedKeys:      func(f *figures, v float64) { f.evicted = v },
		metrics.MemberLinkUp:           func(f *figures, v float64) { f.linkUp, f.hasLink = v, true },
	}
	out := map[string]*figures{}
	for fname, f := range fams {
		apply, ok := set[fname]
		if !ok {
			continue
		}
		for _, m := range f.GetMetric() {
			l := map[string]string{}
			for _, lp := range m.GetLabel() {
				l[lp.GetName()] = lp.GetValue()
			}
			member := l[metrics.LabelMember]
			if l[metrics.LabelNamespace] != ns || l[metrics.LabelCache] != name || member == "" {
				continue
			}
			fig := out[member]
			if fig == nil {
				fig = &figures{}
				out[member] = fig
			}
			apply(fig, m.GetGauge().GetValue()+m.GetCounter().GetValue())
		}
	}
	if len(out) == 0 {
		return nil, fmt.Sprintf("the operator's metrics (%s) have no series of this cache yet", where)
	}
	return out, where
}

// scrape reads the leader's /metrics: --metrics-url; else the Lease holder's pod through the API
// server's proxy; else an operator on this machine (make up's, 127.0.0.1:8080).
func (c *client) scrape(ctx context.Context) (string, string, error) {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	if c.opts.metricsURL != "" {
		return httpGet(ctx, c.opts.metricsURL)
	}
	lease, err := c.kube.CoordinationV1().Leases(c.opts.operatorNamespace).Get(ctx, "cache-operator", metav1.GetOptions{})
	if err == nil && lease.Spec.HolderIdentity != nil {
		pod, _, _ := strings.Cut(*lease.Spec.HolderIdentity, "_")
		if _, err := c.kube.CoreV1().Pods(c.opts.operatorNamespace).Get(ctx, pod, metav1.GetOptions{}); err == nil {
			body, err := c.kube.CoreV1().Pods(c.opts.operatorNamespace).ProxyGet("http", pod, "8080", "/metrics", nil).DoRaw(ctx)
			where := "pod " + c.opts.operatorNamespace + "/" + pod + ", the leader"
			if err != nil {
				return "", where, fmt.Errorf("the leader's metrics (%s) through the API server: %v", where, err)
			}
			return string(body), where, nil
		}
	}
	return httpGet(ctx, "http://127.0.0.1:8080/metrics")
}

func httpGet(ctx context.Context, url string) (string, string, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return "", url, err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return "", url, fmt.Errorf("the operator's metrics are not reachable (%v); give --metrics-url", err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(io.LimitReader(resp.Body, 64<<20))
	if err != nil || resp.StatusCode != http.StatusOK {
		return "", url, fmt.Errorf("the operator's metrics at %s: status %d, %v", url, resp.StatusCode, err)
	}
	return string(b), url, nil
}

// bytesIEC is n bytes for people: 0 B, 12.3 KiB, 1.5 GiB.
func bytesIEC(n float64) string {
	units := []string{"B", "KiB", "MiB", "GiB", "TiB"}
	i := 0
	for n >= 1024 && i < len(units)-1 {
		n /= 1024
		i++
	}
	if i == 0 {
		return fmt.Sprintf("%.0f B", n)
	}
	return fmt.Sprintf("%.1f %s", n, units[i])
}
