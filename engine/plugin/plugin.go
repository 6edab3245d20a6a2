// Package plugin is the kubectl plugin kubectl-managedcache (also kubectl-mc): the operator's
// binary, run under either name, answers `kubectl managedcache status|switchover|rotate-password|
// backup|hibernate|resume|report NAME`. It talks to the API server as the user (their kubeconfig,
// context and namespace), and reads the members' figures from the operator's /metrics (the
// leader's, through the API server's pod proxy).
//
// It is not part of the operator: nothing here runs in the cluster.
package plugin

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"

	"example.com/cache-operator/engine/api"
)

// Names are the executable names kubectl finds the plugin by.
var Names = []string{"kubectl-managedcache", "kubectl-mc"}

// IsPlugin reports whether the program was started under a plugin name (argv[0]).
func IsPlugin(argv0 string) bool {
	base := filepath.Base(argv0)
	for _, n := range Names {
		if base == n {
			return true
		}
	}
	return false
}

const usage = `kubectl managedcache (or kubectl mc): ManagedCaches from the command line.

Usage:
  kubectl managedcache status NAME            members, roles, lag, memory, the last failover,
                                              backups, conditions and recent warnings
  kubectl managedcache switchover NAME [--to POD]
                                              hand the primary role over (default: to the most
                                              caught-up replica) and wait for it
  kubectl managedcache rotate-password NAME   a new clients' password (the old one works for an overlap)
  kubectl managedcache backup NAME            take a backup now (spec.backup must be set) and wait
  kubectl managedcache hibernate NAME         stop every member, keep the data (spec.hibernate)
  kubectl managedcache resume NAME            start them again, with the same primary
  kubectl managedcache report NAME [-o FILE]  a tarball for a bug report (secrets redacted)

Flags (anywhere on the line):
  -n, --namespace NS      the cache's namespace (default: the context's)
  --kubeconfig PATH       (default: $KUBECONFIG or ~/.kube/config)
  --context NAME          the kubeconfig context
  --operator-namespace NS where the operator runs (default cache-operator-system)
  --metrics-url URL       the operator's /metrics, when it runs outside the cluster
                          (default: the leader pod through the API server, else http://127.0.0.1:8080/metrics)
  --wait=false            return once the change is made (switchover, backup, hibernate, resume)
  --timeout DURATION      how long to wait (default 3m)
`

// options are the plugin's flags.
type options struct {
	namespace, kubeconfig, context, operatorNamespace, metricsURL, to, output, operatorLog string
	wait                                                                                   bool
	timeout                                                                                time.Duration
}

// client is what every command uses.
type client struct {
	opts    options
	ns      string
	config  *rest.Config
	kube    kubernetes.Interface
	dyn     dynamic.Interface
	out     io.Writer
	now     func() time.Time
	started time.Time
}

// Main runs the plugin with args (without the program name) and returns the exit status.
func Main(args []string, stdout, stderr io.Writer) int {
	opts, pos, err := parse(args)
	if errors.Is(err, flag.ErrHelp) || (err == nil && len(pos) == 0) {
		fmt.Fprint(stdout, usage)
		return 0
	}
	if err != nil {
		fmt.Fprintf(stderr, "error: %v\n\n%s", err, usage)
		return 2
	}
	cmd := pos[0]
	run, ok := commands[cmd]
	if !ok {
		fmt.Fprintf(stderr, "error: unknown command %q\n\n%s", cmd, usage)
		return 2
	}
	if len(pos) != 2 {
		fmt.Fprintf(stderr, "error: %s takes the cache's name: kubectl managedcache %s NAME\n", cmd, cmd)
		return 2
	}
	c, err := newClient(opts, stdout)
	if err != nil {
		fmt.Fprintf(stderr, "error: %v\n", err)
		return 1
	}
	ctx, cancel := context.WithTimeout(context.Background(), opts.timeout+30*time.Second)
	defer cancel()
	if err := run(ctx, c, pos[1]); err != nil {
		fmt.Fprintf(stderr, "error: %v\n", err)
		return 1
	}
	return 0
}

var commands = map[string]func(context.Context, *client, string) error{
	"status":          status,
	"switchover":      switchover,
	"rotate-password": rotatePassword,
	"backup":          backup,
	"hibernate":       func(ctx context.Context, c *client, name string) error { return setHibernate(ctx, c, name, true) },
	"resume":          func(ctx context.Context, c *client, name string) error { return setHibernate(ctx, c, name, false) },
	"report":          report,
}

// parse reads flags wherever they are on the line (kubectl passes the user's words as they are)
// and returns the positional words.
func parse(args []string) (options, []string, error) {
	var o options
	fs := flag.NewFlagSet("kubectl-managedcache", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	for _, n := range []string{"n", "namespace"} {
		fs.StringVar(&o.namespace, n, "", "")
	}
	fs.StringVar(&o.kubeconfig, "kubeconfig", "", "")
	fs.StringVar(&o.context, "context", "", "")
	fs.StringVar(&o.operatorNamespace, "operator-namespace", "cache-operator-system", "")
	fs.StringVar(&o.metricsURL, "metrics-url", "", "")
	fs.StringVar(&o.to, "to", "", "")
	for _, n := range []string{"o", "output"} {
		fs.StringVar(&o.output, n, "", "")
	}
	fs.StringVar(&o.operatorLog, "operator-log", "", "")
	fs.BoolVar(&o.wait, "wait", true, "")
	fs.DurationVar(&o.timeout, "timeout", 3*time.Minute, "")
	var pos []string
	for {
		if err := fs.Parse(args); err != nil {
			return o, nil, err
		}
		if fs.NArg() == 0 {
			return o, pos, nil
		}
		pos = append(pos, fs.Arg(0))
		args = fs.Args()[1:]
	}
}

func newClient(opts options, out io.Writer) (*client, error) {
	rules := clientcmd.NewDefaultClientConfigLoadingRules()
	if opts.kubeconfig != "" {
		rules.ExplicitPath = opts.kubeconfig
	}
	cc := clientcmd.NewNonInteractiveDeferredLoadingClientConfig(rules, &clientcmd.ConfigOverrides{CurrentContext: opts.context})
	config, err := cc.ClientConfig()
	if err != nil {
		return nil, err
	}
	ns := opts.namespace
	if ns == "" {
		if ns, _, err = cc.Namespace(); err != nil {
			return nil, err
		}
	}
	kube, err := kubernetes.NewForConfig(config)
	if err != nil {
		return nil, err
	}
	dyn, err := dynamic.NewForConfig(config)
	if err != nil {
		return nil, err
	}
	return &client{opts: opts, ns: ns, config: config, kube: kube, dyn: dyn, out: out, now: time.Now, started: time.Now()}, nil
}

// cache reads the ManagedCache name (v2).
func (c *client) cache(ctx context.Context, name string) (*unstructured.Unstructured, error) {
	mc, err := c.dyn.Resource(api.Resource).Namespace(c.ns).Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		return nil, fmt.Errorf("ManagedCache %s/%s: %w", c.ns, name, err)
	}
	return mc, nil
}

// waitFor polls cond every half second until it is done, fails, or --timeout passes; what says
// what is awaited, and the error names the last thing seen.
func (c *client) waitFor(ctx context.Context, what string, cond func() (bool, string, error)) error {
	deadline := c.now().Add(c.opts.timeout)
	for {
		done, seen, err := cond()
		if err != nil {
			return err
		}
		if done {
			return nil
		}
		if c.now().After(deadline) {
			return fmt.Errorf("timed out after %v waiting for %s; last seen: %s", c.opts.timeout, what, seen)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(500 * time.Millisecond):
		}
	}
}

// conditionOf returns the condition typ of a cache (status, reason, message; "" when absent).
func conditionOf(mc *unstructured.Unstructured, typ string) (string, string, string) {
	conds, _, _ := unstructured.NestedSlice(mc.Object, "status", "conditions")
	for _, cond := range conds {
		m, _ := cond.(map[string]interface{})
		if m["type"] == typ {
			s, _ := m["status"].(string)
			r, _ := m["reason"].(string)
			msg, _ := m["message"].(string)
			return s, r, msg
		}
	}
	return "", "", ""
}

// ago is a duration for people: 4m12s, 3h5m, 2d.
func ago(d time.Duration) string {
	switch {
	case d < time.Minute:
		return d.Round(time.Second).String()
	case d < time.Hour:
		return d.Round(time.Second).String()
	case d < 48*time.Hour:
		return strings.TrimSuffix(d.Round(time.Minute).String(), "0s")
	}
	return fmt.Sprintf("%dd", int(d.Hours()/24))
}

// exitIfPlugin runs the plugin and exits when the program was started under a plugin name.
func ExitIfPlugin() {
	if IsPlugin(os.Args[0]) {
		os.Exit(Main(os.Args[1:], os.Stdout, os.Stderr))
	}
}
