package render

import (
	"context"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"example.com/cache-operator/engine/api"
)

// A sharded cache's member, as its StatefulSet and ConfigMap render it (Redis 7.0, the oldest
// engine the matrix runs in cluster mode), started by its own start script with the real
// redis-server on 127.0.0.1: it runs in cluster mode, announces its pod's address, and keeps its
// node's state beside its data; the internal user runs the cluster commands the operator sends
// and reads no key; the clients' user reads the cluster's layout (what a cluster client asks
// first), reads and writes keys and changes nothing in the cluster; the readiness probe says not
// ready until the cluster is ok, then ready.
func TestShardedMemberStartsInClusterMode(t *testing.T) {
	server, err := exec.LookPath("redis-server")
	if err != nil {
		t.Fatalf("redis-server is needed (Debian package redis-server): %v", err)
	}
	mc := readCache(t, "testdata/v2-sharded.input.yaml")
	if err := unstructured.SetNestedMap(mc.Object, map[string]interface{}{"name": "redis", "version": "7.0"}, "spec", "engine"); err != nil {
		t.Fatal(err)
	}
	spec, err := api.ParseSpec(mc)
	if err != nil {
		t.Fatal(err)
	}
	const password = "clients-password"
	auth := SimpleAuth(password)
	objs, err := mustRenderer(t).Children(mc, spec, testConfig, auth)
	if err != nil {
		t.Fatal(err)
	}
	sts := findChild(t, objs, "StatefulSet", api.ShardSetName(mc.GetName(), 1))
	cm := findChild(t, objs, "ConfigMap", api.ConfigName(mc.GetName()))
	live, _, _ := unstructured.NestedString(cm.Object, "data", api.LiveConfigKey)
	users, _, _ := unstructured.NestedString(cm.Object, "data", api.UsersConfigKey)
	var script, config, ready string
	containers, _, _ := unstructured.NestedSlice(sts.Object, "spec", "template", "spec", "containers")
	for _, c := range containers {
		c := c.(map[string]interface{})
		if c["name"] != "redis" {
			continue
		}
		cmd, _ := c["command"].([]interface{})
		script, _ = cmd[len(cmd)-1].(string)
		env, _ := c["env"].([]interface{})
		for _, e := range env {
			e := e.(map[string]interface{})
			if e["name"] == "REDIS_CONFIG" {
				config, _ = e["value"].(string)
			}
		}
		probe, _, _ := unstructured.NestedStringSlice(c, "readinessProbe", "exec", "command")
		ready = probe[len(probe)-1]
	}
	if script == "" || config == "" || ready == "" {
		t.Fatalf("the member's container has no start script, REDIS_CONFIG or readiness probe")
	}
	if labels := sts.Object["spec"].(map[string]interface{})["template"].(map[string]interface{})["metadata"].(map[string]interface{})["labels"].(map[string]interface{}); labels[api.LabelShard] != "1" {
		t.Errorf("shard 1's pods are labelled %v; want %s=1", labels, api.LabelShard)
	}

	// The sandbox: free ports for the server and its bus, the data and /tmp folders, the internal
	// password's file; the server binds 127.0.0.1 only.
	port, bus := freePort(t), freePort(t)
	data, _, conf, _ := scriptSandbox(t)
	internalDir := filepath.Join(filepath.Dir(data), "internal")
	if err := os.MkdirAll(internalDir, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(internalDir, api.InternalPasswordKey), []byte(auth.Internal), 0o600); err != nil {
		t.Fatal(err)
	}
	sandbox := func(s string) string {
		for _, r := range [][2]string{
			{"cluster-port " + strconv.Itoa(api.ClusterBusPort), "cluster-port " + strconv.Itoa(bus)},
			{"port " + strconv.Itoa(api.Port), "port " + strconv.Itoa(port)},
			{"-p " + strconv.Itoa(api.Port), "-p " + strconv.Itoa(port)},
			{"bind * -::*", "bind 127.0.0.1"},
			{"/tmp/redis.conf", conf},
			{"/var/run/cache/internal", internalDir},
			{"/data", data},
		} {
			s = strings.ReplaceAll(s, r[0], r[1])
		}
		return s
	}
	for _, want := range []string{"cluster-enabled yes", "cluster-config-file /data/nodes.conf", "cluster-node-timeout"} {
		if !strings.Contains(config, want) {
			t.Errorf("REDIS_CONFIG lacks %q:\n%s", want, config)
		}
	}
	cmd := exec.Command("sh", "-c", sandbox(script))
	cmd.Env = []string{"PATH=" + filepath.Dir(server) + ":/usr/bin:/bin", "POD_IP=127.0.0.1",
		"PASSWORD_SHA256=" + auth.PasswordHash, "INTERNAL_PASSWORD=" + auth.Internal,
		"REDIS_CONFIG=" + sandbox(config), "REDIS_LIVE_CONFIG=" + live, "REDIS_USERS=" + users}
	out := &strings.Builder{}
	cmd.Stdout, cmd.Stderr = out, out
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })

	addr := net.JoinHostPort("127.0.0.1", strconv.Itoa(port))
	clients := redis.NewClient(&redis.Options{Addr: addr, Password: password, MaxRetries: -1, Protocol: 2, DisableIdentity: true})
	internal := redis.NewClient(&redis.Options{Addr: addr, Username: api.InternalUser, Password: auth.Internal, MaxRetries: -1, Protocol: 2, DisableIdentity: true})
	defer clients.Close()
	defer internal.Close()
	ctx := context.Background()
	for deadline := time.Now().Add(10 * time.Second); ; {
		if err := clients.Ping(ctx).Err(); err == nil {
			break
		} else if time.Now().After(deadline) {
			t.Fatalf("the member did not answer within 10 s: %v\n%s", err, out)
		}
		time.Sleep(50 * time.Millisecond) // polling a starting server, with a deadline
	}
	probe := func() bool {
		c := exec.Command("sh", "-c", sandbox(ready))
		c.Env = []string{"PATH=" + filepath.Dir(server) + ":/usr/bin:/bin"}
		return c.Run() == nil
	}
	if probe() {
		t.Error("the readiness probe says ready before the member has a cluster")
	}

	nodes, err := internal.Do(ctx, "CLUSTER", "NODES").Text()
	if err != nil || !strings.Contains(nodes, "127.0.0.1:"+strconv.Itoa(port)+"@"+strconv.Itoa(bus)) {
		t.Errorf("CLUSTER NODES as the internal user: %q, %v; want this member at its announced address and bus port", nodes, err)
	}
	if _, err := os.Stat(filepath.Join(data, "nodes.conf")); err != nil {
		t.Errorf("the node's state is not on the volume: %v", err)
	}
	for _, c := range []struct {
		who  *redis.Client
		name string
		args []interface{}
		ok   bool
	}{
		{internal, "internal", []interface{}{"CLUSTER", "ADDSLOTSRANGE", 0, 16383}, true},
		{internal, "internal", []interface{}{"CLUSTER", "MYID"}, true},
		{internal, "internal", []interface{}{"GET", "k"}, false},
		{clients, "default", []interface{}{"CLUSTER", "MEET", "127.0.0.1", 1}, false},
		{clients, "default", []interface{}{"CLUSTER", "ADDSLOTSRANGE", 0, 1}, false},
		{clients, "default", []interface{}{"CLUSTER", "FORGET", "x"}, false},
		{clients, "default", []interface{}{"CLUSTER", "KEYSLOT", "k"}, true},
		{clients, "default", []interface{}{"READONLY"}, true},
		{clients, "default", []interface{}{"READWRITE"}, true},
	} {
		err := c.who.Do(ctx, c.args...).Err()
		if refused := err != nil && strings.Contains(err.Error(), "NOPERM"); refused == c.ok || (c.ok && err != nil) {
			t.Errorf("%s %v: %v; want allowed %v", c.name, c.args, err, c.ok)
		}
	}
	var state string
	for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(100 * time.Millisecond) { // polling the cluster's state, with a deadline
		info, _ := internal.Do(ctx, "CLUSTER", "INFO").Text()
		if state = clusterState(info); state == "ok" {
			break
		}
	}
	if state != "ok" {
		t.Fatalf("cluster_state %q after every slot was assigned; want ok", state)
	}
	for _, args := range [][]interface{}{{"CLUSTER", "SLOTS"}, {"CLUSTER", "SHARDS"}, {"SET", "k", "v"}, {"GET", "k"}} {
		if err := clients.Do(ctx, args...).Err(); err != nil {
			t.Errorf("default %v: %v", args, err)
		}
	}
	if !probe() {
		t.Errorf("the readiness probe says not ready in a cluster that is ok\n%s", out)
	}
}

func freePort(t *testing.T) int {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}

// clusterState is the cluster_state line of CLUSTER INFO.
func clusterState(info string) string {
	for _, line := range strings.Split(info, "\n") {
		if s, ok := strings.CutPrefix(strings.TrimSpace(line), "cluster_state:"); ok {
			return s
		}
	}
	return ""
}
