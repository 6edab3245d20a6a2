package app

import (
	"errors"
	"fmt"
	"net/http"
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
type fence struct {
	elector       atomic.Pointer[leaderelection.LeaderElector]
	leaseDuration time.Duration
	renewDeadline time.Duration
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
	return nil
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
