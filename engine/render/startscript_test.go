package render

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"example.com/cache-operator/engine/api"
)

// The member's start script of a restoring cache (templates/statefulset.yaml), run by sh with its
// paths moved into a temporary directory and a stand-in server that records the configuration it
// was given: who starts as the primary and who as a replica, with the AOF off or on, for each
// state of the volume and of the restore.
func TestRestoreStartScript(t *testing.T) {
	mc := readCache(t, "testdata/v2-restore.input.yaml")
	script := memberScript(t, "testdata/v2-restore.input.yaml", nil)
	if !strings.Contains(script, "conf=/tmp/redis.conf") || !strings.Contains(script, "/data/dump.rdb") {
		t.Fatalf("the start script no longer has the paths this test moves:\n%s", script)
	}
	first := api.RestoreMember(mc.GetName())
	other := mc.GetName() + "-1"
	hex := strings.Repeat("ab", 32)
	for _, tc := range []struct {
		name                     string
		pod, role, state         string
		files                    []string // in the data directory
		primary, aofOff, dumpRms bool
	}{
		{"first member, restored snapshot, restore pending", first, api.RoleReplica, "pending", []string{"dump.rdb"}, true, true, false},
		{"first member already elected, restarted on its bare snapshot", first, api.RolePrimary, "pending", []string{"dump.rdb"}, false, true, false},
		{"first member, restore completed, bare snapshot", first, api.RoleReplica, api.RestoreDone, []string{"dump.rdb"}, false, true, false},
		{"another member, restored snapshot", other, api.RoleReplica, "pending", []string{"dump.rdb"}, false, true, false},
		{"labelled primary, snapshot in its AOF", first, api.RolePrimary, api.RestoreDone, []string{"dump.rdb", "appendonlydir/appendonly.aof.manifest"}, true, false, true},
		{"replica, snapshot in its AOF", other, api.RoleReplica, api.RestoreDone, []string{"dump.rdb", "appendonlydir/appendonly.aof.manifest"}, false, false, true},
		{"a member that restored nothing: it syncs", other, api.RoleReplica, "pending", nil, false, false, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			data, bin, conf, got := scriptSandbox(t)
			for _, f := range tc.files {
				if err := os.WriteFile(filepath.Join(data, f), []byte("x"), 0o644); err != nil {
					t.Fatal(err)
				}
			}
			server := "#!/bin/sh\ncp \"$1\" " + got + "\n"
			if err := os.WriteFile(filepath.Join(bin, "redis-server"), []byte(server), 0o755); err != nil {
				t.Fatal(err)
			}
			s := strings.ReplaceAll(strings.ReplaceAll(script, "/tmp/redis.conf", conf), "/data", data)
			cmd := exec.Command("sh", "-c", s)
			cmd.Env = []string{"PATH=" + bin + ":" + os.Getenv("PATH"), "POD_NAME=" + tc.pod, "POD_ROLE=" + tc.role, "RESTORE_STATE=" + tc.state,
				"PRIMARY_HOST=copy-rw.shop.svc.cluster.local", "PASSWORD_SHA256=" + hex, "INTERNAL_PASSWORD=" + hex,
				"REDIS_CONFIG=appendonly yes", "REDIS_LIVE_CONFIG=maxmemory 1", "REDIS_USERS=default ~* +@all\ninternal -@all +ping"}
			out, err := cmd.CombinedOutput()
			if err != nil {
				t.Fatalf("the start script failed: %v\n%s", err, out)
			}
			b, err := os.ReadFile(got)
			if err != nil {
				t.Fatalf("the server was not started: %v\n%s", err, out)
			}
			given := string(b)
			if primary := !strings.Contains(given, "\nreplicaof "); primary != tc.primary {
				t.Errorf("started as the primary: %v; want %v (%s)\n%s", primary, tc.primary, strings.TrimSpace(string(out)), given)
			}
			if off := strings.HasSuffix(strings.TrimSpace(strings.Split(given, "\nreplicaof ")[0]), "appendonly no"); off != tc.aofOff {
				t.Errorf("appendonly off as the last word: %v; want %v\n%s", off, tc.aofOff, given)
			}
			_, statErr := os.Stat(filepath.Join(data, "dump.rdb"))
			if removed := os.IsNotExist(statErr) && len(tc.files) > 0; removed != tc.dumpRms {
				t.Errorf("the snapshot's copy removed: %v; want %v", removed, tc.dumpRms)
			}
		})
	}
}

// memberScript renders the member container's start script of the cache in input, with its
// ConfigMap's allow-data-loss key when annotated.
func memberScript(t *testing.T, input string, annotations map[string]string) string {
	t.Helper()
	r := mustRenderer(t)
	mc := readCache(t, input)
	mc.SetAnnotations(annotations)
	spec, _ := api.SpecFrom(mc)
	objs, err := r.Children(mc, spec, testConfig, SimpleAuth(goldenPassword))
	if err != nil {
		t.Fatal(err)
	}
	sts := findChild(t, objs, "StatefulSet", mc.GetName())
	containers, _, _ := unstructured.NestedSlice(sts.Object, "spec", "template", "spec", "containers")
	for _, c := range containers {
		c := c.(map[string]interface{})
		if c["name"] == "redis" {
			cmd, _ := c["command"].([]interface{})
			s, _ := cmd[len(cmd)-1].(string)
			return s
		}
	}
	t.Fatal("no redis container")
	return ""
}

// A member whose volume holds data in a newer snapshot format than its server reads (a downgrade
// across a format change) does not start and keeps the data, unless the cache allows the loss:
// then the data is discarded and the member starts empty. Data it reads starts as always.
func TestStartScriptDataFormat(t *testing.T) {
	script := memberScript(t, "testdata/size-5-noeviction.input.yaml", nil) // redis 7.0: reads up to 10
	if !strings.Contains(script, "-gt 10 ]") {
		t.Fatalf("the start script of a redis 7.0 cache does not compare with format 10:\n%s", script)
	}
	hex := strings.Repeat("ab", 32)
	for _, tc := range []struct {
		name, header, allowed string
		starts, kept          bool
	}{
		{"format 12, redis 8.0's, into 7.0: refused, kept", "REDIS0012", "", false, true},
		{"format 12 into 7.0, the loss allowed: discarded", "REDIS0012", "true", true, false},
		{"format 10: loads", "REDIS0010", "", true, true},
		{"format 9: loads", "REDIS0009", "true", true, true},
		{"not a snapshot header: left to the server", "garbage!!", "", true, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			data, bin, conf, got := scriptSandbox(t)
			base := filepath.Join(data, "appendonlydir", "appendonly.aof.1.base.rdb")
			for path, body := range map[string]string{base: tc.header + "rest of the snapshot", filepath.Join(data, "appendonlydir", "appendonly.aof.manifest"): "m",
				filepath.Join(bin, "redis-server"): "#!/bin/sh\ncp \"$1\" " + got + "\n"} {
				if err := os.WriteFile(path, []byte(body), 0o755); err != nil {
					t.Fatal(err)
				}
			}
			s := strings.ReplaceAll(strings.ReplaceAll(script, "/tmp/redis.conf", conf), "/data", data)
			cmd := exec.Command("sh", "-c", s)
			cmd.Env = []string{"PATH=" + bin + ":" + os.Getenv("PATH"), "POD_NAME=queue-1", "POD_ROLE=" + api.RolePrimary,
				"PRIMARY_HOST=queue-rw.shop.svc.cluster.local", "PASSWORD_SHA256=" + hex, "INTERNAL_PASSWORD=" + hex, "DATA_LOSS_ALLOWED=" + tc.allowed,
				"REDIS_CONFIG=appendonly yes", "REDIS_LIVE_CONFIG=maxmemory 1", "REDIS_USERS=default ~* +@all\ninternal -@all +ping"}
			out, err := cmd.CombinedOutput()
			_, statErr := os.Stat(got)
			if started := err == nil && statErr == nil; started != tc.starts {
				t.Errorf("started: %v (%v); want %v\n%s", started, err, tc.starts, out)
			}
			_, baseErr := os.Stat(base)
			if kept := baseErr == nil; kept != tc.kept {
				t.Errorf("data kept: %v; want %v\n%s", kept, tc.kept, out)
			}
			if !tc.starts && !strings.Contains(string(out), "snapshot format 0012 and redis-7.0 reads up to 10; not starting") {
				t.Errorf("the refusal does not say why:\n%s", out)
			}
			if tc.starts && !tc.kept {
				b, _ := os.ReadFile(got)
				if !strings.Contains(string(b), "\nreplicaof ") {
					t.Errorf("a member that discarded its data started as the primary:\n%s", b)
				}
			}
		})
	}
}

// scriptSandbox makes the folders a start script runs in under test: the data directory (with
// appendonlydir), a bin folder for the stand-in server, and the paths of the configuration the
// script writes and of the copy the stand-in server keeps.
func scriptSandbox(t *testing.T) (data, bin, conf, got string) {
	t.Helper()
	dir := t.TempDir()
	data, bin, conf, got = filepath.Join(dir, "data"), filepath.Join(dir, "bin"), filepath.Join(dir, "redis.conf"), filepath.Join(dir, "given.conf")
	for _, d := range []string{filepath.Join(data, "appendonlydir"), bin} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	return data, bin, conf, got
}
