package framework

import (
	"bufio"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"time"
)

// AuditEvent is the part of an audit.k8s.io/v1 Event that the tests read.
type AuditEvent struct {
	AuditID   string `json:"auditID"`
	Stage     string `json:"stage"`
	Verb      string `json:"verb"`
	UserAgent string `json:"userAgent"`
	User      struct {
		Username string `json:"username"`
	} `json:"user"`
	ObjectRef *struct {
		Resource    string `json:"resource"`
		Namespace   string `json:"namespace"`
		Name        string `json:"name"`
		APIGroup    string `json:"apiGroup"`
		Subresource string `json:"subresource"`
	} `json:"objectRef"`
	ResponseStatus *struct {
		Code int `json:"code"`
	} `json:"responseStatus"`
	RequestReceivedTimestamp time.Time `json:"requestReceivedTimestamp"`
}

// AuditLogPath is where the cluster's API server writes its audit log (see localcluster/cluster.sh).
func (c *Cluster) AuditLogPath() string { return filepath.Join(c.Dir, "audit.log") }

// AuditEvents reads every completed request (stage ResponseComplete) from the audit log.
func (c *Cluster) AuditEvents() ([]AuditEvent, error) { return c.auditEvents(false) }

// AuditEventsAnyStage also returns requests still running (a watch logs ResponseStarted).
func (c *Cluster) AuditEventsAnyStage() ([]AuditEvent, error) { return c.auditEvents(true) }

func (c *Cluster) auditEvents(anyStage bool) ([]AuditEvent, error) {
	f, err := os.Open(c.AuditLogPath())
	if err != nil {
		return nil, err
	}
	defer f.Close()
	var events []AuditEvent
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 1<<20), 16<<20)
	for sc.Scan() {
		var ev AuditEvent
		if err := json.Unmarshal(sc.Bytes(), &ev); err != nil {
			// The API server may be writing the last line right now.
			continue
		}
		if anyStage || ev.Stage == "ResponseComplete" {
			events = append(events, ev)
		}
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("reading %s: %w", c.AuditLogPath(), err)
	}
	return events, nil
}
