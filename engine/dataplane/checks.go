package dataplane

import (
	"sync"
	"time"

	"k8s.io/apimachinery/pkg/types"

	"example.com/cache-operator/engine/roles"
)

// memberChecks remembers, per member (by pod UID), what its server was last found with or given
// (a digest), and when.
type memberChecks map[types.UID]memberCheck

type memberCheck struct {
	key string
	at  time.Time
}

// sweep runs check, in parallel, on every member whose server answered and whose last check is
// not for key, is older than liveRecheck, or which again says must be read anyway. It then calls
// result for every member that answered, under one lock: err nil when its server is current
// (found so before, or made so now). Members gone are forgotten.
func (mc memberChecks) sweep(members []roles.Member, key string, again func(*roles.Member) bool, check func(*roles.Member) error, result func(*roles.Member, error)) {
	now := time.Now()
	present := map[types.UID]bool{}
	var stale []*roles.Member
	for i := range members {
		m := &members[i]
		present[m.UID] = true
		if !m.Observed {
			continue
		}
		if chk, ok := mc[m.UID]; ok && chk.key == key && now.Sub(chk.at) < liveRecheck && !again(m) {
			result(m, nil)
			continue
		}
		stale = append(stale, m)
	}
	var wg sync.WaitGroup
	var mu sync.Mutex
	for _, m := range stale {
		wg.Add(1)
		go func() {
			defer wg.Done()
			err := check(m)
			mu.Lock()
			defer mu.Unlock()
			if err == nil {
				mc[m.UID] = memberCheck{key: key, at: now}
			}
			result(m, err)
		}()
	}
	wg.Wait()
	for uid := range mc {
		if !present[uid] {
			delete(mc, uid)
		}
	}
}

// liveRecheck is how often a member with current live settings is read again: a setting changed
// by hand (CONFIG SET) is put back within it.
const liveRecheck = time.Minute
