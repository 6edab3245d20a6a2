package app

import (
	"errors"
	"net/http"
	"testing"
)

type okTransport struct{ calls int }

func (o *okTransport) RoundTrip(*http.Request) (*http.Response, error) {
	o.calls++
	return &http.Response{StatusCode: http.StatusOK, Body: http.NoBody}, nil
}

// Reads always pass; every other method asks the fence first.
func TestFencedTransport(t *testing.T) {
	refuse := errors.New("refused")
	for _, tc := range []struct {
		method string
		err    error
		passes bool
	}{
		{http.MethodGet, refuse, true}, {http.MethodHead, refuse, true},
		{http.MethodPost, refuse, false}, {http.MethodPut, refuse, false}, {http.MethodPatch, refuse, false}, {http.MethodDelete, refuse, false},
		{http.MethodPatch, nil, true},
	} {
		next := &okTransport{}
		rt := fencedTransport{next: next, mayWrite: func() error { return tc.err }}
		req, _ := http.NewRequest(tc.method, "https://api/x", nil)
		_, err := rt.RoundTrip(req)
		if passed := err == nil && next.calls == 1; passed != tc.passes {
			t.Errorf("%s with fence %v: passed %v (err %v), want %v", tc.method, tc.err, passed, err, tc.passes)
		}
	}
	// Without an elector (not elected yet), nothing is written.
	if err := (&fence{}).mayWrite(); !errors.Is(err, errNotLeading) {
		t.Errorf("mayWrite before any election: %v, want errNotLeading", err)
	}
}
