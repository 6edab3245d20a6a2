// Package dataset fingerprints what a server holds: the key count and one SHA-256 over every key
// with its type, its value read logically (GET, HGETALL, LRANGE, SMEMBERS, ZRANGE, XRANGE; sorted
// where the type has no order) and whether it has a TTL, in key order. DUMP is not used: it
// serializes the encoding, which a reload may change (an intset becomes a listpack). Two servers with equal fingerprints hold the same data. Tests and benchmarks compare a
// restored cache with its source through it.
//
// It is not for the operator's own decisions: it reads the whole keyspace.
package dataset

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"sort"
	"strconv"

	"github.com/redis/go-redis/v9"
)

// Fingerprint is a dataset's key count and digest.
type Fingerprint struct {
	Keys   int64
	SHA256 string
}

func (f Fingerprint) String() string { return fmt.Sprintf("%d keys, sha256 %s", f.Keys, f.SHA256) }

// Of reads every key of the client's database (SCAN, then TYPE, PTTL and the value, in pipelines).
// The keys' names are held in memory (sorted), the values one batch at a time.
func Of(ctx context.Context, c redis.UniversalClient) (Fingerprint, error) {
	var keys []string
	iter := c.Scan(ctx, 0, "", 1000).Iterator()
	for iter.Next(ctx) {
		keys = append(keys, iter.Val())
	}
	if err := iter.Err(); err != nil {
		return Fingerprint{}, fmt.Errorf("SCAN: %w", err)
	}
	sort.Strings(keys)
	keys = dedupe(keys) // SCAN may return a key twice
	h := sha256.New()
	const batch = 200
	for i := 0; i < len(keys); i += batch {
		part := keys[i:min(i+batch, len(keys))]
		pipe := c.Pipeline()
		types := make([]*redis.StatusCmd, len(part))
		ttls := make([]*redis.DurationCmd, len(part))
		for j, k := range part {
			types[j] = pipe.Type(ctx, k)
			ttls[j] = pipe.PTTL(ctx, k)
		}
		if _, err := pipe.Exec(ctx); err != nil {
			return Fingerprint{}, fmt.Errorf("TYPE: %w", err)
		}
		pipe = c.Pipeline()
		values := make([]redis.Cmder, len(part))
		for j, k := range part {
			switch types[j].Val() {
			case "string":
				values[j] = pipe.Get(ctx, k)
			case "hash":
				values[j] = pipe.HGetAll(ctx, k)
			case "list":
				values[j] = pipe.LRange(ctx, k, 0, -1)
			case "set":
				values[j] = pipe.SMembers(ctx, k)
			case "zset":
				values[j] = pipe.ZRangeWithScores(ctx, k, 0, -1)
			case "stream":
				values[j] = pipe.XRange(ctx, k, "-", "+")
			default:
				values[j] = pipe.Exists(ctx, k) // gone meanwhile, or a module's type: its name only
			}
		}
		if _, err := pipe.Exec(ctx); err != nil && err != redis.Nil {
			return Fingerprint{}, fmt.Errorf("reading values: %w", err)
		}
		for j, k := range part {
			fmt.Fprintf(h, "%d:%s %s %t ", len(k), k, types[j].Val(), ttls[j].Val() > 0)
			writeValue(h, values[j])
			h.Write([]byte{'\n'})
		}
	}
	return Fingerprint{Keys: int64(len(keys)), SHA256: hex.EncodeToString(h.Sum(nil))}, nil
}

// writeValue writes a value in one canonical form: length-prefixed strings, sets and hashes
// sorted.
func writeValue(w io.Writer, cmd redis.Cmder) {
	str := func(s string) { fmt.Fprintf(w, "%d:%s", len(s), s) }
	switch c := cmd.(type) {
	case *redis.StringCmd:
		str(c.Val())
	case *redis.MapStringStringCmd:
		fields := make([]string, 0, len(c.Val()))
		for f := range c.Val() {
			fields = append(fields, f)
		}
		sort.Strings(fields)
		for _, f := range fields {
			str(f)
			str(c.Val()[f])
		}
	case *redis.StringSliceCmd:
		vals := c.Val()
		if c.Name() == "smembers" {
			vals = append([]string(nil), vals...)
			sort.Strings(vals)
		}
		for _, v := range vals {
			str(v)
		}
	case *redis.ZSliceCmd:
		for _, z := range c.Val() {
			str(fmt.Sprint(z.Member))
			str(strconv.FormatFloat(z.Score, 'g', -1, 64))
		}
	case *redis.XMessageSliceCmd:
		for _, m := range c.Val() {
			str(m.ID)
			fields := make([]string, 0, len(m.Values))
			for f := range m.Values {
				fields = append(fields, f)
			}
			sort.Strings(fields)
			for _, f := range fields {
				str(f)
				str(fmt.Sprint(m.Values[f]))
			}
		}
	case *redis.IntCmd:
		fmt.Fprint(w, c.Val())
	}
}

func dedupe(sorted []string) []string {
	out := sorted[:0]
	for i, k := range sorted {
		if i == 0 || k != sorted[i-1] {
			out = append(out, k)
		}
	}
	return out
}
