package app

import (
	"errors"
	"net/http"
	"testing"
	"time"
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

type statusTransport struct {
	code int
	err  error
	// onSend runs while the request is "on the wire" (to move the clock).
	onSend func()
}

func (s statusTransport) RoundTrip(*http.Request) (*http.Response, error) {
	if s.onSend != nil {
		s.onSend()
	}
	if s.err != nil {
		return nil, s.err
	}
	return &http.Response{StatusCode: s.code, Body: http.NoBody}, nil
}

// The fence keeps the time a successful write of the lease was SENT, not when its answer came: an
// answer that took longer than the renew deadline leaves the fence closed, although the elector
// would count the renewal as fresh.
func TestLeaseTransportRecordsSendTime(t *testing.T) {
	start := time.Unix(1_000_000, 0)
	now := start
	f := &fence{leaseDuration: 15 * time.Second, renewDeadline: 10 * time.Second, now: func() time.Time { return now }}
	if err := f.sentRecently(); !errors.Is(err, errNotLeading) {
		t.Fatalf("before any renewal: %v, want errNotLeading", err)
	}
	lease := "https://api/apis/coordination.k8s.io/v1/namespaces/op/leases/cache-operator"
	send := func(method, url string, rt statusTransport) {
		t.Helper()
		req, _ := http.NewRequest(method, url, nil)
		_, _ = f.leaseTransport(rt).RoundTrip(req)
	}

	// A renewal answered at once opens the fence until the renew deadline has passed.
	send(http.MethodPut, lease, statusTransport{code: 200})
	if err := f.sentRecently(); err != nil {
		t.Fatalf("just after a renewal: %v", err)
	}
	now = start.Add(9 * time.Second)
	if err := f.sentRecently(); err != nil {
		t.Fatalf("9 s after a renewal (deadline 10 s): %v", err)
	}
	now = start.Add(11 * time.Second)
	if err := f.sentRecently(); !errors.Is(err, errNotLeading) {
		t.Fatalf("11 s after a renewal (deadline 10 s): %v, want errNotLeading", err)
	}

	// A renewal whose answer took 12 s: sent at 20 s, answered at 32 s. The fence stays closed.
	now = start.Add(20 * time.Second)
	send(http.MethodPut, lease, statusTransport{code: 200, onSend: func() { now = now.Add(12 * time.Second) }})
	if err := f.sentRecently(); !errors.Is(err, errNotLeading) {
		t.Errorf("after a renewal answered 12 s after it was sent: %v, want errNotLeading", err)
	}

	// Failed writes, reads and writes of other objects do not count.
	now = start.Add(40 * time.Second)
	send(http.MethodPut, lease, statusTransport{code: 409})
	send(http.MethodPut, lease, statusTransport{err: errors.New("connection reset")})
	send(http.MethodGet, lease, statusTransport{code: 200})
	send(http.MethodPut, "https://api/api/v1/namespaces/op/configmaps/x", statusTransport{code: 200})
	if err := f.sentRecently(); !errors.Is(err, errNotLeading) {
		t.Errorf("after a conflict, an error, a read and another object's write: %v, want errNotLeading", err)
	}
	// The acquisition (a create) counts.
	send(http.MethodPost, "https://api/apis/coordination.k8s.io/v1/namespaces/op/leases", statusTransport{code: 201})
	if err := f.sentRecently(); err != nil {
		t.Errorf("just after creating the lease: %v", err)
	}
}
