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
