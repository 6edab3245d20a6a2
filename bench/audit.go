package main

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"time"

	"example.com/cache-operator/e2e/framework"
)

// request is one API request of the operator, from the audit log.
type request struct {
	at        time.Time
	verb      string
	resource  string // resource[/subresource], with the group for non-core groups
	namespace string
}

// kind says what a request counts as: a write, a list or watch (an informer's), or a read beyond
// them (a GET, which an operator working from its informers should never need).
func (r request) kind() string {
	switch r.verb {
	case "create", "update", "patch", "delete", "deletecollection":
		return "write"
	case "list", "watch":
		return "listwatch"
	default:
		return "read"
	}
}

// auditReader reads the API server's audit log as it grows and keeps the requests of one user.
type auditReader struct {
	path string
	user string
	off  int64
	ino  uint64          // the file read so far (0: none yet)
	seen map[string]bool // audit IDs: a watch is logged when it starts and when it ends
	reqs []request
}

func newAuditReader(path, user string) *auditReader {
	return &auditReader{path: path, user: user, seen: map[string]bool{}}
}

// skipToEnd starts reading at the log's current end: what came before is not the operator's.
func (a *auditReader) skipToEnd() error {
	fi, err := os.Stat(a.path)
	if err != nil {
		return err
	}
	a.off = fi.Size()
	return nil
}

// poll reads the lines written since the last poll (whole lines only) and returns how many new
// requests of the user they held.
func (a *auditReader) poll() (int, error) {
	f, err := os.Open(a.path)
	if err != nil {
		return 0, err
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return 0, err
	}
	var ino uint64
	if sys, ok := st.Sys().(*syscall.Stat_t); ok {
		ino = sys.Ino
	}
	if st.Size() < a.off || (a.ino != 0 && ino != a.ino) {
		// Rotated (a cluster not made by the bench, or another AUDIT_LOG_MAX_MB): the requests
		// in between are lost, and a count would be too low.
		return 0, fmt.Errorf("the audit log %s was rotated: its requests cannot be counted", a.path)
	}
	a.ino = ino
	if _, err := f.Seek(a.off, io.SeekStart); err != nil {
		return 0, err
	}
	r := bufio.NewReaderSize(f, 1<<20)
	added := 0
	for {
		line, err := r.ReadBytes('\n')
		if err != nil { // a partial last line is read again next time
			break
		}
		a.off += int64(len(line))
		if !strings.Contains(string(line), a.user) {
			continue
		}
		var ev framework.AuditEvent
		if json.Unmarshal(line, &ev) != nil || ev.User.Username != a.user || a.seen[ev.AuditID] {
			continue
		}
		a.seen[ev.AuditID] = true
		req := request{at: ev.RequestReceivedTimestamp, verb: ev.Verb}
		if ev.ObjectRef != nil {
			req.resource = ev.ObjectRef.Resource
			if ev.ObjectRef.APIGroup != "" {
				req.resource += "." + ev.ObjectRef.APIGroup
			}
			if ev.ObjectRef.Subresource != "" {
				req.resource += "/" + ev.ObjectRef.Subresource
			}
			req.namespace = ev.ObjectRef.Namespace
		}
		a.reqs = append(a.reqs, req)
		added++
	}
	return added, nil
}

// between returns the requests received in [from, to).
func (a *auditReader) between(from, to time.Time) []request {
	var out []request
	for _, r := range a.reqs {
		if !r.at.Before(from) && r.at.Before(to) {
			out = append(out, r)
		}
	}
	return out
}

// last is the time of the latest request read, or the zero time.
func (a *auditReader) last() time.Time {
	var t time.Time
	for _, r := range a.reqs {
		if r.at.After(t) {
			t = r.at
		}
	}
	return t
}

// requestCounts summarises requests: totals by kind, and counts by "VERB resource".
type requestCounts struct {
	Writes    int            `json:"writes"`
	ListWatch int            `json:"list_watch"`
	Reads     int            `json:"reads_beyond_watch"`
	ByVerb    map[string]int `json:"by_verb_resource"`
	// InNamespace counts the writes to the caches' namespace: those that scale with the caches;
	// InNamespaceByVerb the same by verb and resource.
	InNamespace       int            `json:"writes_in_cache_namespace"`
	InNamespaceByVerb map[string]int `json:"writes_in_cache_namespace_by_verb_resource"`
}

func countRequests(reqs []request, ns string) requestCounts {
	c := requestCounts{ByVerb: map[string]int{}, InNamespaceByVerb: map[string]int{}}
	for _, r := range reqs {
		switch r.kind() {
		case "write":
			c.Writes++
			if r.namespace == ns {
				c.InNamespace++
				c.InNamespaceByVerb[strings.ToUpper(r.verb)+" "+r.resource]++
			}
		case "listwatch":
			c.ListWatch++
		default:
			c.Reads++
		}
		c.ByVerb[strings.ToUpper(r.verb)+" "+r.resource]++
	}
	return c
}

// describe lists the counts by verb and resource, most frequent first.
func (c requestCounts) describe() string {
	keys := make([]string, 0, len(c.ByVerb))
	for k := range c.ByVerb {
		keys = append(keys, k)
	}
	sort.Slice(keys, func(i, j int) bool {
		if c.ByVerb[keys[i]] != c.ByVerb[keys[j]] {
			return c.ByVerb[keys[i]] > c.ByVerb[keys[j]]
		}
		return keys[i] < keys[j]
	})
	var parts []string
	for _, k := range keys {
		parts = append(parts, k+": "+strconv.Itoa(c.ByVerb[k]))
	}
	return strings.Join(parts, ", ")
}
