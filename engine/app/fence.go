package app

import (
	"errors"
	"fmt"
	"net/http"
	"strings"
	"sync/atomic"
	"time"

	"k8s.io/client-go/tools/leaderelection"
)

// errNotLeading refuses a write of a replica that does not (or may no longer) hold the lease.
var errNotLeading = errors.New("not the leader: the lease is not held or was not renewed in time; write refused")

// fence lets the controller's writes through only while this replica holds the lease, renewed
// within the renew deadline. A leader that was paused (SIGSTOP, a stalled VM) past its lease wakes
// up with workers in the middle of reconciles, while another replica already leads; client-go
// notices the loss only when its next renewal fails, seconds later. The fence closes that window:
// a write is refused as soon as the last renewal is older than the renew deadline, which is
// shorter than the lease another replica must see expire before it takes over.
//
// client-go's own check is not enough on its own: it measures from the time a renewal's answer
// arrived, and an answer can arrive long after the API server wrote the lease (a slow or paused
// request). Another replica may measure the lease's expiry from the write. So the fence also
// keeps the time each successful renewal was sent (leaseTransport, on the elector's own client):
// the server wrote the lease after that instant, so while less than the renew deadline has passed
// since it, the lease cannot have expired for anyone.
type fence struct {
	elector       atomic.Pointer[leaderelection.LeaderElector]
	leaseDuration time.Duration
	renewDeadline time.Duration
	// sent is the UnixNano time at which the last successful write of the lease was sent.
	sent atomic.Int64
	now  func() time.Time
}

func (f *fence) clock() time.Time {
	if f.now != nil {
		return f.now()
	}
	return time.Now()
}

// sentRecently reports whether a write of the lease that succeeded was sent within the renew
// deadline.
func (f *fence) sentRecently() error {
	sent := f.sent.Load()
	if sent == 0 {
		return fmt.Errorf("%w (no renewal of the lease has succeeded yet)", errNotLeading)
	}
	if age := f.clock().Sub(time.Unix(0, sent)); age > f.renewDeadline {
		return fmt.Errorf("%w (the last successful renewal was sent %v ago, more than the renew deadline %v)", errNotLeading, age.Round(time.Millisecond), f.renewDeadline)
	}
	return nil
}

// mayWrite returns nil while this replica leads with a fresh renewal.
func (f *fence) mayWrite() error {
	le := f.elector.Load()
	if le == nil || !le.IsLeader() {
		return errNotLeading
	}
	// Check fails once the last renewal is older than leaseDuration + the tolerance given.
	if err := le.Check(f.renewDeadline - f.leaseDuration); err != nil {
		return fmt.Errorf("%w (%v)", errNotLeading, err)
	}
	return f.sentRecently()
}

// leaseTransport wraps the elector's transport: it notes when each write of a Lease (a renewal
// or the acquisition) was sent, and keeps that time once the write succeeded.
func (f *fence) leaseTransport(next http.RoundTripper) http.RoundTripper {
	return leaseTransport{next: next, f: f}
}

type leaseTransport struct {
	next http.RoundTripper
	f    *fence
}

func (t leaseTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	write := (req.Method == http.MethodPut || req.Method == http.MethodPost) && strings.Contains(req.URL.Path, "/leases")
	sent := t.f.clock()
	resp, err := t.next.RoundTrip(req)
	if write && err == nil && resp.StatusCode >= 200 && resp.StatusCode < 300 {
		// Keep the latest send time: answers of two writes may arrive out of order.
		for {
			old := t.f.sent.Load()
			if sent.UnixNano() <= old || t.f.sent.CompareAndSwap(old, sent.UnixNano()) {
				break
			}
		}
	}
	return resp, err
}

// wrap returns a transport that asks mayWrite before every request that is not a read.
func (f *fence) wrap(next http.RoundTripper) http.RoundTripper {
	return fencedTransport{next: next, mayWrite: f.mayWrite}
}

type fencedTransport struct {
	next     http.RoundTripper
	mayWrite func() error
}

func (t fencedTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	switch req.Method {
	case http.MethodGet, http.MethodHead, http.MethodOptions:
	default:
		if err := t.mayWrite(); err != nil {
			return nil, err
		}
	}
	return t.next.RoundTrip(req)
}
