package app

import (
	"net/http/httptest"
	"testing"
)

// Profiles are served beside /metrics only when asked for.
func TestProfilingIsOptIn(t *testing.T) {
	for _, on := range []bool{false, true} {
		rec := httptest.NewRecorder()
		metricsMux(on).ServeHTTP(rec, httptest.NewRequest("GET", "/debug/pprof/heap", nil))
		if want := map[bool]int{false: 404, true: 200}[on]; rec.Code != want {
			t.Errorf("profiling %v: /debug/pprof/heap answered %d, want %d", on, rec.Code, want)
		}
	}
}
