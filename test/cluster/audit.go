package cluster

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"time"
)

// auditPolicy logs every client request once, at completion, without
// bodies: enough to count requests per user and user agent, cheap enough for
// tests. The apiserver's own loopback traffic (over 90% of events in a short
// run) is left out.
const auditPolicy = `apiVersion: audit.k8s.io/v1
kind: Policy
omitStages: ["RequestReceived", "ResponseStarted"]
rules:
- level: None
  users: ["system:apiserver"]
- level: Metadata
`

func (c *ControlPlane) writeAuditPolicy() error {
	c.auditPolicy = filepath.Join(c.opts.WorkDir, "audit-policy.yaml")
	if err := os.WriteFile(c.auditPolicy, []byte(auditPolicy), 0o644); err != nil {
		return fmt.Errorf("writing audit policy: %w", err)
	}
	return nil
}

// AuditLogPath is where the apiserver writes its audit log (JSON lines) when
// started with Options.Audit.
func (c *ControlPlane) AuditLogPath() string {
	return filepath.Join(c.opts.WorkDir, "logs", "audit.log")
}

// AuditEvent is the part of an audit.k8s.io/v1 Event that tests look at. It
// is decoded here rather than imported, to keep k8s.io/apiserver out of the
// module's dependencies.
type AuditEvent struct {
	Stage      string `json:"stage"`
	Verb       string `json:"verb"`
	RequestURI string `json:"requestURI"`
	UserAgent  string `json:"userAgent"`
	User       struct {
		Username string   `json:"username"`
		Groups   []string `json:"groups"`
	} `json:"user"`
	ObjectRef *struct {
		Resource    string `json:"resource"`
		Namespace   string `json:"namespace"`
		Name        string `json:"name"`
		APIGroup    string `json:"apiGroup"`
		Subresource string `json:"subresource"`
	} `json:"objectRef"`
	ResponseStatus *struct {
		Code int32 `json:"code"`
	} `json:"responseStatus"`
	RequestReceivedTimestamp time.Time `json:"requestReceivedTimestamp"`
}

// AuditEvents reads every event the apiserver has audited so far, across
// restarts. The apiserver writes an event as the request completes, so a
// caller that just got a response may need to poll briefly for its event.
func (c *ControlPlane) AuditEvents() ([]AuditEvent, error) {
	if !c.opts.Audit {
		return nil, errors.New("audit log not enabled (Options.Audit)")
	}
	data, err := os.ReadFile(c.AuditLogPath())
	if err != nil {
		return nil, fmt.Errorf("reading audit log: %w", err)
	}
	// A line being written right now has no newline yet; leave it for the
	// next read.
	data = data[:bytes.LastIndexByte(data, '\n')+1]
	var events []AuditEvent
	for line := range bytes.Lines(data) {
		var ev AuditEvent
		if err := json.Unmarshal(line, &ev); err != nil {
			return nil, fmt.Errorf("decoding audit log: %w", err)
		}
		events = append(events, ev)
	}
	return events, nil
}
