package dataplane

import "testing"

func TestRoundLag(t *testing.T) {
	for lag, want := range map[int64]int64{-5: 0, 0: 0, 1<<20 - 1: 0, 1 << 20: 1 << 20, 3 << 20: 2 << 20, 5 << 30: 4 << 30} {
		if got := roundLag(lag); got != want {
			t.Errorf("roundLag(%d) = %d; want %d", lag, got, want)
		}
	}
}
