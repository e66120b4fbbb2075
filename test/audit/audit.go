// Package audit counts API requests in the test API server's audit log, so
// tests can assert how many writes a component made.
package audit

import (
	"bufio"
	"encoding/json"
	"os"
	"strings"
)

// Event is the part of an audit event the tests read.
type Event struct {
	Stage     string `json:"stage"`
	Verb      string `json:"verb"`
	UserAgent string `json:"userAgent"`
	ObjectRef struct {
		Resource    string `json:"resource"`
		Name        string `json:"name"`
		Subresource string `json:"subresource"`
	} `json:"objectRef"`
}

// Count returns how many completed requests match.
func Count(path string, match func(Event) bool) (int, error) {
	f, err := os.Open(path)
	if err != nil {
		return 0, err
	}
	defer f.Close()
	n := 0
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 1<<20), 16<<20)
	for sc.Scan() {
		var e Event
		if json.Unmarshal(sc.Bytes(), &e) != nil || e.Stage != "ResponseComplete" {
			continue
		}
		if match(e) {
			n++
		}
	}
	return n, sc.Err()
}

// Writes matches create/update/patch/delete requests on one object by a
// user agent prefix.
func Writes(resource, name, userAgentPrefix string) func(Event) bool {
	return func(e Event) bool {
		switch e.Verb {
		case "create", "update", "patch", "delete":
		default:
			return false
		}
		return e.ObjectRef.Resource == resource && e.ObjectRef.Name == name && strings.HasPrefix(e.UserAgent, userAgentPrefix)
	}
}

// WriteCounts are nodeconfig's API writes (create, update, patch, delete
// by a nodeconfig-* user agent) by kind.
type WriteCounts struct{ Statusd, Events, NodeConfig, Leases, Other int }

// Minus is the writes since o.
func (w WriteCounts) Minus(o WriteCounts) WriteCounts {
	return WriteCounts{w.Statusd - o.Statusd, w.Events - o.Events, w.NodeConfig - o.NodeConfig, w.Leases - o.Leases, w.Other - o.Other}
}

// Total leaves out lease renewals: they are per replica, not per node.
func (w WriteCounts) Total() int { return w.Statusd + w.Events + w.NodeConfig + w.Other }

// CountWrites counts nodeconfig's writes in the audit log at path.
func CountWrites(path string) (w WriteCounts, err error) {
	_, err = Count(path, func(e Event) bool {
		switch e.Verb {
		case "create", "update", "patch", "delete":
		default:
			return false
		}
		switch {
		case !strings.HasPrefix(e.UserAgent, "nodeconfig-"):
		case strings.HasPrefix(e.UserAgent, "nodeconfig-statusd"):
			w.Statusd++
		case e.ObjectRef.Resource == "events":
			w.Events++
		case e.ObjectRef.Resource == "nodeconfigs":
			w.NodeConfig++
		case e.ObjectRef.Resource == "leases":
			w.Leases++
		default:
			w.Other++
		}
		return false
	})
	return w, err
}
