// Package monitoring tests manifests/monitoring: the PrometheusRule's alerts with promtool (each
// fires and resolves, in tests/alerts.test.yaml), and the Grafana dashboard's and the alerts'
// queries against the metric names the operator exports.
package monitoring

import (
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"sigs.k8s.io/yaml"

	"example.com/cache-operator/e2e/framework"
	"example.com/cache-operator/engine/metrics"
)

type ruleGroup struct {
	Name  string `json:"name"`
	Rules []struct {
		Alert  string `json:"alert,omitempty"`
		Record string `json:"record,omitempty"`
		Expr   string `json:"expr"`
	} `json:"rules"`
}

// prometheusRule reads the PrometheusRule and returns its groups as they are (for a rule file)
// and parsed.
func prometheusRule(t *testing.T) (interface{}, []ruleGroup) {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(framework.RepoRoot(), "manifests", "monitoring", "prometheusrule.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	var obj struct {
		Kind string `json:"kind"`
		Spec struct {
			Groups interface{} `json:"groups"`
		} `json:"spec"`
	}
	if err := yaml.Unmarshal(b, &obj); err != nil || obj.Kind != "PrometheusRule" {
		t.Fatalf("prometheusrule.yaml: kind %q, %v", obj.Kind, err)
	}
	raw, _ := json.Marshal(obj.Spec.Groups)
	var groups []ruleGroup
	if err := json.Unmarshal(raw, &groups); err != nil {
		t.Fatal(err)
	}
	return obj.Spec.Groups, groups
}

// dashboardQueries returns every query of the Grafana dashboard, by panel title.
func dashboardQueries(t *testing.T) map[string][]string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(framework.RepoRoot(), "manifests", "monitoring", "grafana-dashboard.json"))
	if err != nil {
		t.Fatal(err)
	}
	var d struct {
		Panels []struct {
			Title   string `json:"title"`
			Targets []struct {
				Expr string `json:"expr"`
			} `json:"targets"`
		} `json:"panels"`
	}
	if err := json.Unmarshal(b, &d); err != nil {
		t.Fatal(err)
	}
	out := map[string][]string{}
	for _, p := range d.Panels {
		for _, tg := range p.Targets {
			out[p.Title] = append(out[p.Title], tg.Expr)
		}
	}
	return out
}

var (
	quoted    = regexp.MustCompile(`"(?:[^"\\]|\\.)*"`)
	matchers  = regexp.MustCompile(`\{[^}]*\}`)
	ranges    = regexp.MustCompile(`\[[^\]]*\]`)
	grouping  = regexp.MustCompile(`\b(?:by|without|on|ignoring|group_left|group_right)\s*\([^)]*\)`)
	calls     = regexp.MustCompile(`\b[a-zA-Z_]\w*\s*\(`)
	ident     = regexp.MustCompile(`\b[a-zA-Z_:][a-zA-Z0-9_:]*\b`)
	operators = map[string]bool{"and": true, "or": true, "unless": true, "bool": true, "offset": true, "by": true, "without": true,
		"on": true, "ignoring": true, "group_left": true, "group_right": true, "e": true, "inf": true, "nan": true}
)

// metricNames returns the metric names a PromQL query reads: what is left once strings, label
// matchers, ranges, grouping clauses, function names and keywords are taken out.
func metricNames(expr string) []string {
	s := quoted.ReplaceAllString(expr, `""`)
	s = matchers.ReplaceAllString(s, " ")
	s = ranges.ReplaceAllString(s, " ")
	s = grouping.ReplaceAllString(s, " ")
	s = calls.ReplaceAllString(s, "(")
	var out []string
	for _, id := range ident.FindAllString(s, -1) {
		if !operators[strings.ToLower(id)] {
			out = append(out, id)
		}
	}
	return out
}

// exported reports whether name is a series the operator exports (a histogram's _bucket, _sum
// and _count included), or Prometheus's own up.
func exported(names []string, name string) bool {
	if name == "up" || slices.Contains(names, name) {
		return true
	}
	for _, suffix := range []string{"_bucket", "_sum", "_count"} {
		if base, ok := strings.CutSuffix(name, suffix); ok && slices.Contains(names, base) {
			return true
		}
	}
	return false
}

func TestMetricNames(t *testing.T) {
	got := metricNames(`sum by (namespace, cache) (cache_operator_member_keys{namespace=~"$namespace", cache="a b"} * on (namespace) group_left x_y{role="primary"}) / (rate(z_total[5m]) > 0) or vector(0)`)
	if want := []string{"cache_operator_member_keys", "x_y", "z_total"}; !slices.Equal(got, want) {
		t.Errorf("metricNames: %v; want %v", got, want)
	}
}

// TestQueriesUseExportedMetrics: every metric the dashboard's panels and the alerts read is one
// the operator exports (engine/metrics.Names), and the dashboard covers caches, members,
// failovers and the operator.
func TestQueriesUseExportedMetrics(t *testing.T) {
	names := metrics.Names()
	check := func(where, expr string) {
		ms := metricNames(expr)
		if len(ms) == 0 {
			t.Errorf("%s: %q reads no metric", where, expr)
		}
		for _, m := range ms {
			if !exported(names, m) {
				t.Errorf("%s: %q reads %s, which the operator does not export", where, expr, m)
			}
		}
	}
	queries := dashboardQueries(t)
	all := ""
	for title, exprs := range queries {
		for _, e := range exprs {
			check("dashboard panel "+title, e)
			all += e + "\n"
		}
	}
	for _, want := range []string{"cache_operator_managedcaches", "cache_operator_member_role", "cache_operator_member_replication_lag_bytes",
		"cache_operator_member_memory_used_bytes", "cache_operator_member_evicted_keys_total", "cache_operator_failovers_total",
		"cache_operator_member_last_failover_timestamp_seconds", "cache_operator_reconcile_total", "workqueue_depth"} {
		if !strings.Contains(all, want) {
			t.Errorf("the dashboard has no panel reading %s", want)
		}
	}
	_, groups := prometheusRule(t)
	for _, g := range groups {
		for _, r := range g.Rules {
			check("alert "+r.Alert, r.Expr)
		}
	}
	t.Logf("%d dashboard panels with queries, %d exported metric families", len(queries), len(names))
}

// promtool returns the promtool on the PATH: Debian's prometheus package, which make test's
// prerequisites (hack/prereqs.sh --test) install; under make test (CACHE_E2E=1) its absence fails.
func promtool(t *testing.T) string {
	t.Helper()
	path, err := exec.LookPath("promtool")
	if err != nil {
		if os.Getenv("CACHE_E2E") == "" {
			t.Skip("needs promtool on the PATH (Debian's prometheus package; make prereqs-test installs it)")
		}
		t.Fatalf("promtool: %v (make prereqs-test installs Debian's prometheus package)", err)
	}
	return path
}

// TestAlertsWithPromtool: promtool checks the PrometheusRule's groups and runs
// tests/alerts.test.yaml, in which every alert fires and then resolves.
func TestAlertsWithPromtool(t *testing.T) {
	bin := promtool(t)
	groups, parsed := prometheusRule(t)
	dir := t.TempDir()
	rules, err := yaml.Marshal(map[string]interface{}{"groups": groups})
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "rules.yaml"), rules, 0o644); err != nil {
		t.Fatal(err)
	}
	tests, err := os.ReadFile(filepath.Join(framework.RepoRoot(), "manifests", "monitoring", "tests", "alerts.test.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "alerts.test.yaml"), tests, 0o644); err != nil {
		t.Fatal(err)
	}
	run := func(args ...string) string {
		cmd := exec.Command(bin, args...)
		cmd.Dir = dir
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("promtool %s: %v\n%s", strings.Join(args, " "), err, out)
		}
		return string(out)
	}
	t.Log(strings.TrimSpace(run("check", "rules", "rules.yaml")))
	t.Log(strings.TrimSpace(run("test", "rules", "alerts.test.yaml")))

	// Every alert has a case that fires it and one that finds it resolved afterwards.
	var suite struct {
		Tests []struct {
			Name  string `json:"name"`
			Evals []struct {
				Alert string        `json:"alertname"`
				Exp   []interface{} `json:"exp_alerts"`
			} `json:"alert_rule_test"`
		} `json:"tests"`
	}
	if err := yaml.Unmarshal(tests, &suite); err != nil {
		t.Fatal(err)
	}
	fired, resolved := map[string]bool{}, map[string]bool{}
	for _, tc := range suite.Tests {
		firedHere := map[string]bool{}
		for _, e := range tc.Evals {
			if len(e.Exp) > 0 {
				firedHere[e.Alert], fired[e.Alert] = true, true
			} else if firedHere[e.Alert] {
				resolved[e.Alert] = true
			}
		}
	}
	n := 0
	for _, g := range parsed {
		for _, r := range g.Rules {
			if r.Alert == "" {
				continue
			}
			n++
			if !fired[r.Alert] || !resolved[r.Alert] {
				t.Errorf("alert %s: fired in a test %v, resolved after it %v; want both", r.Alert, fired[r.Alert], resolved[r.Alert])
			}
		}
	}
	t.Logf("%d alerts, each fired and resolved by promtool", n)
}

// TestDashboardQueriesParse: promtool parses every dashboard query (as a recording rule, with
// the dashboard's variables given a value).
func TestDashboardQueriesParse(t *testing.T) {
	bin := promtool(t)
	type rule struct {
		Record string `json:"record"`
		Expr   string `json:"expr"`
	}
	var rules []rule
	for _, exprs := range dashboardQueries(t) {
		for _, e := range exprs {
			e = strings.NewReplacer("$namespace", ".*", "$cache", ".*").Replace(e)
			rules = append(rules, rule{Record: "dashboard:query", Expr: e})
		}
	}
	out, err := yaml.Marshal(map[string]interface{}{"groups": []interface{}{map[string]interface{}{"name": "dashboard", "rules": rules}}})
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), "dashboard.yaml")
	if err := os.WriteFile(path, out, 0o644); err != nil {
		t.Fatal(err)
	}
	if msg, err := exec.Command(bin, "check", "rules", "--lint=none", path).CombinedOutput(); err != nil {
		t.Fatalf("promtool check rules on the dashboard's queries: %v\n%s", err, msg)
	}
	t.Logf("%d dashboard queries parse", len(rules))
}
