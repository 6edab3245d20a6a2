package snapshot

import (
	"bytes"
	"context"
	"io"
	"testing"
	"time"
)

// A paced reader never goes faster than its cap (a lower bound on the time, which a slow machine
// only raises), passes every byte through, and no cap is no wrapper.
func TestPacedReader(t *testing.T) {
	data := bytes.Repeat([]byte("x"), 2<<20)
	if r := bytes.NewReader(data); paced(context.Background(), r, 0) != io.Reader(r) {
		t.Error("no cap: want the reader itself")
	}
	start := time.Now()
	got, err := io.ReadAll(paced(context.Background(), bytes.NewReader(data), 8<<20))
	took := time.Since(start)
	if err != nil || !bytes.Equal(got, data) {
		t.Fatalf("read %d of %d bytes, err %v", len(got), len(data), err)
	}
	// 2 MiB at 8 MiB/s, the first 256 KiB (the burst) at once: the other 1,792 KiB take at least
	// 218.75 ms (the bound was 224 ms, which a run on a busy machine read under, at 220 ms: the
	// arithmetic was wrong, not the pace).
	if min := 218 * time.Millisecond; took < min {
		t.Errorf("2 MiB at 8 MiB/s read in %s; the cap allows no less than %s", took, min)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := io.ReadAll(paced(ctx, bytes.NewReader(data), 1<<20)); err == nil {
		t.Error("a cancelled context: the paced read went on; want its error")
	}
}
