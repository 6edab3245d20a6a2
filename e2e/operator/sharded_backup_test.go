package operator

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"net"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/minio/minio-go/v7"
	"github.com/redis/go-redis/v9"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"example.com/cache-operator/e2e/framework"
)

// TestShardedCacheBackup: a ManagedCacheBackup of a sharded cache (3 shards × 2, 3,000 keys) is
// one snapshot per shard, streamed side by side from a replica of each shard in sync with its
// primary, to one object each in the backup's folder. Its status lists each shard's slots (the
// three cover every slot once), member, object, size, keys and checksum; each object's SHA-256 is
// the one recorded, each shard's keys are exactly the filled keys whose slots it serves, and the
// sums are the totals. A new cache of 3 shards restored from it serves every key, each shard the
// slots it served; one of 4 shards is refused the backup. With keep 1, a second backup deletes
// the first and every object in its folder.
func TestShardedCacheBackup(t *testing.T) {
	parallel(t)
	c := framework.Setup(t)
	ctx := context.Background()
	ns := c.RealNamespace(t, "shbak")
	startOperatorIn(t, c, ns)
	deleteCachesOnCleanup(t, c, ns)
	dumpBackupsOnFailure(t, c, ns)
	store := c.ObjectStore(t)
	c.StoreSecret(t, ns, "store", store, nil)
	const name = "bk"
	createShardedWith(t, c, ns, name, map[string]interface{}{
		"backup": map[string]interface{}{"store": map[string]interface{}{"secretName": "store"}, "keep": int64(1)}})
	pw := password(t, c, ns, name)
	cc := clusterClient(net.JoinHostPort(clusterIP(t, c, ns, name+"-rw"), "6379"), pw)
	defer cc.Close()
	const keys, size = 3000, 100
	fillCluster(t, cc, keys, size)
	// Each filled key's slot, as the cluster computes it.
	slotOf := map[int]int64{}
	for i := 0; i < keys; i += 500 {
		cmds, err := cc.Pipelined(ctx, func(p redis.Pipeliner) error {
			for j := i; j < min(i+500, keys); j++ {
				p.ClusterKeySlot(ctx, "fill:"+strconv.Itoa(j))
			}
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
		for k, cmd := range cmds {
			slotOf[i+k] = cmd.(*redis.IntCmd).Val()
		}
	}
	// Every replica caught up, so that each shard is streamed from a replica holding every key.
	framework.Eventually(t, time.Minute, "every shard's replica holding its primary's keys", func() (bool, string, error) {
		slots, err := cc.ClusterSlots(ctx).Result()
		if err != nil {
			return false, err.Error(), nil
		}
		var seen []string
		ok := len(slots) == 3
		for _, s := range slots {
			var sizes []int64
			for _, n := range s.Nodes {
				cl := newClient(n.Addr, pw)
				size, err := cl.DBSize(ctx).Result()
				cl.Close()
				if err != nil {
					return false, err.Error(), nil
				}
				sizes = append(sizes, size)
			}
			seen = append(seen, fmt.Sprint(sizes))
			ok = ok && len(sizes) == 2 && sizes[0] == sizes[1]
		}
		return ok, "keys of each shard's primary and replica: " + strings.Join(seen, ", "), nil
	})

	t0 := time.Now()
	createBackup(t, c, ns, "bk-1", name)
	st := waitBackup(t, c, ns, "bk-1", 3*time.Minute)
	took := time.Since(t0)
	if st.Phase != "Completed" {
		t.Fatalf("backup bk-1: %s/%s %s", st.Phase, st.Reason, st.Message)
	}
	shards := shardsOfBackup(t, c, ns, "bk-1")
	cl, err := store.Client()
	if err != nil {
		t.Fatal(err)
	}
	covered := map[int64]bool{}
	var sumKeys, sumBytes int64
	for _, s := range shards {
		inShard := int64(0)
		ranges := parseSlots(t, s.slots)
		for _, slot := range slotOf {
			if inRanges(ranges, slot) {
				inShard++
			}
		}
		for _, r := range ranges {
			for slot := r[0]; slot <= r[1]; slot++ {
				if covered[slot] {
					t.Errorf("slot %d in two shards of the backup", slot)
				}
				covered[slot] = true
			}
		}
		sum, n := objectSHA(t, cl, store.Bucket, s.location)
		t.Logf("shard %d: slots %s from %s (fromPrimary %v): %d keys (%d filled keys in its slots), %d bytes, object %s of %d bytes, SHA-256 %s (recorded %s)",
			s.shard, s.slots, s.member, s.fromPrimary, s.keys, inShard, s.bytes, s.location, n, sum[:12], s.checksum[:min(12, len(s.checksum))])
		if s.keys != inShard || sum != s.checksum || n != s.bytes || s.fromPrimary {
			t.Errorf("shard %d: %d keys recorded, %d filled keys in its slots; checksum %s, recorded %s; %d bytes, recorded %d; from the primary %v",
				s.shard, s.keys, inShard, sum, s.checksum, n, s.bytes, s.fromPrimary)
		}
		sumKeys, sumBytes = sumKeys+s.keys, sumBytes+s.bytes
	}
	t.Logf("backup of 3 shards: %s/%s in %.1f s: %q at %s", st.Phase, st.Reason, took.Seconds(), st.Message, st.Location)
	if len(shards) != 3 || len(covered) != 16384 || sumKeys != keys || st.Keys != keys || st.Bytes != sumBytes {
		t.Errorf("%d shards covering %d slots, %d keys in all (status %d keys, %d bytes; the shards' %d); want 3 shards over 16384 slots and %d keys",
			len(shards), len(covered), sumKeys, st.Keys, st.Bytes, sumBytes, keys)
	}

	// A new cache of 3 shards restored from it: each shard's first member loads its shard's object,
	// each shard serves the slots it served, every key is there. A cache of 4 shards is refused.
	t1 := time.Now()
	createShardedWith(t, c, ns, "rs", map[string]interface{}{"restore": map[string]interface{}{"backup": "bk-1"}})
	var rs map[string]interface{}
	framework.Eventually(t, time.Minute, "rs's restore completed", func() (bool, string, error) {
		rs = restoreStatusOf(t, c, ns, "rs")
		return rs["phase"] == "Completed", fmt.Sprint(rs), nil
	})
	restored := time.Since(t1)
	rcc := clusterClient(net.JoinHostPort(clusterIP(t, c, ns, "rs-rw"), "6379"), password(t, c, ns, "rs"))
	defer rcc.Close()
	bad := checkFill(t, rcc, keys, size)
	layout, err := rcc.ClusterSlots(ctx).Result()
	if err != nil {
		t.Fatal(err)
	}
	servedBy := map[int64]string{} // slot → the restored cache's member serving it
	for _, s := range layout {
		for slot := int64(s.Start); slot <= int64(s.End); slot++ {
			servedBy[slot] = s.Nodes[0].Addr
		}
	}
	wrongShard := 0
	for _, s := range shards {
		var addr string
		for _, r := range parseSlots(t, s.slots) {
			for slot := r[0]; slot <= r[1]; slot++ {
				if addr == "" {
					addr = servedBy[slot]
				}
				if servedBy[slot] != addr {
					wrongShard++
				}
			}
		}
	}
	t.Logf("restored into a new cache of 3 shards: Ready %.1f s after its create; status.restore %v (message %v); %d of %d keys missing or changed; %d slots not served with the rest of their shard's",
		restored.Seconds(), rs["phase"], rs["message"], bad, keys, wrongShard)
	if rs["phase"] != "Completed" || bad > 0 || wrongShard > 0 {
		t.Errorf("the restore: phase %v, %d keys missing or changed, %d slots apart from their shard", rs["phase"], bad, wrongShard)
	}
	if n := eventCount(t, c, ns, "rs", "Restored"); n == 0 {
		t.Errorf("no Restored Event on the restored cache")
	}
	four := &unstructured.Unstructured{Object: map[string]interface{}{"apiVersion": "cache.example.com/v2", "kind": "ManagedCache",
		"metadata": map[string]interface{}{"name": "rs4", "namespace": ns},
		"spec": map[string]interface{}{"engine": map[string]interface{}{"name": "redis", "version": "7.2"}, "shards": int64(4), "replicas": int64(2),
			"storage": map[string]interface{}{"size": "1Gi"}, "restore": map[string]interface{}{"backup": "bk-1"}}}}
	if _, err := c.Dynamic.Resource(mcV2GVR).Namespace(ns).Create(ctx, four, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	framework.Eventually(t, time.Minute, "rs4's restore refused: 3 shards into 4", func() (bool, string, error) {
		r := restoreStatusOf(t, c, ns, "rs4")
		msg, _ := r["message"].(string)
		return r["phase"] == "Failed" && strings.Contains(msg, "holds 3 shards and this cache has 4"), fmt.Sprint(r), nil
	})

	// keep 1: the next backup deletes this one, its folder with it.
	folder := strings.TrimPrefix(st.Location, "s3://"+store.Bucket+"/")
	createBackup(t, c, ns, "bk-2", name)
	if st2 := waitBackup(t, c, ns, "bk-2", 3*time.Minute); st2.Phase != "Completed" {
		t.Fatalf("backup bk-2: %s/%s %s", st2.Phase, st2.Reason, st2.Message)
	}
	framework.Eventually(t, time.Minute, "bk-1 and every object in "+folder+" deleted", func() (bool, string, error) {
		_, err := c.Dynamic.Resource(mcbGVR).Namespace(ns).Get(ctx, "bk-1", metav1.GetOptions{})
		var left []string
		for o := range cl.ListObjects(ctx, store.Bucket, minio.ListObjectsOptions{Prefix: folder, Recursive: true}) {
			left = append(left, o.Key)
		}
		return err != nil && len(left) == 0, fmt.Sprintf("bk-1: %v; objects left %v", err, left), nil
	})
}

// shardOfBackup is one entry of a backup's status.shards, as the test reads it.
type shardOfBackup struct {
	shard, bytes, keys                int64
	slots, member, location, checksum string
	fromPrimary                       bool
}

func shardsOfBackup(t *testing.T, c *framework.Cluster, ns, name string) []shardOfBackup {
	t.Helper()
	b, err := c.Dynamic.Resource(mcbGVR).Namespace(ns).Get(context.Background(), name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	raw, _, _ := unstructured.NestedSlice(b.Object, "status", "shards")
	var out []shardOfBackup
	for _, r := range raw {
		m, _ := r.(map[string]interface{})
		s := func(f string) string { v, _ := m[f].(string); return v }
		n := func(f string) int64 { v, _, _ := unstructured.NestedInt64(m, f); return v }
		fp, _ := m["fromPrimary"].(bool)
		out = append(out, shardOfBackup{shard: n("shard"), bytes: n("bytes"), keys: n("keys"), slots: s("slots"), member: s("member"),
			location: s("location"), checksum: s("checksum"), fromPrimary: fp})
	}
	sort.Slice(out, func(i, j int) bool { return out[i].shard < out[j].shard })
	return out
}

// parseSlots reads "0-5460,16000-16383" into ranges.
func parseSlots(t *testing.T, s string) [][2]int64 {
	t.Helper()
	var out [][2]int64
	for _, part := range strings.Split(s, ",") {
		from, to, found := strings.Cut(part, "-")
		if !found {
			to = from
		}
		a, err1 := strconv.ParseInt(from, 10, 64)
		b, err2 := strconv.ParseInt(to, 10, 64)
		if err1 != nil || err2 != nil {
			t.Fatalf("slots %q: %v %v", s, err1, err2)
		}
		out = append(out, [2]int64{a, b})
	}
	return out
}

func inRanges(ranges [][2]int64, slot int64) bool {
	for _, r := range ranges {
		if r[0] <= slot && slot <= r[1] {
			return true
		}
	}
	return false
}

// objectSHA downloads the object at location and returns its SHA-256 and size.
func objectSHA(t *testing.T, cl *minio.Client, bucket, location string) (string, int64) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	o, err := cl.GetObject(ctx, bucket, strings.TrimPrefix(location, "s3://"+bucket+"/"), minio.GetObjectOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer o.Close()
	h := sha256.New()
	n, err := io.Copy(h, o)
	if err != nil {
		t.Fatalf("reading %s: %v", location, err)
	}
	return hex.EncodeToString(h.Sum(nil)), n
}

// restoreStatusOf is the cache's status.restore.
func restoreStatusOf(t *testing.T, c *framework.Cluster, ns, name string) map[string]interface{} {
	t.Helper()
	mc, err := c.Dynamic.Resource(mcV2GVR).Namespace(ns).Get(context.Background(), name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	r, _, _ := unstructured.NestedMap(mc.Object, "status", "restore")
	return r
}
