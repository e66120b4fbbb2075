// Package audit counts API requests in the test API server's audit log, so
// tests can assert how many writes a component made.
package audit

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"strings"
	"time"
)

// Event is the part of an audit event the tests read.
type Event struct {
	AuditID   string `json:"auditID"`
	Stage     string `json:"stage"`
	Verb      string `json:"verb"`
	UserAgent string `json:"userAgent"`
	User      struct {
		Username string `json:"username"`
	} `json:"user"`
	// RequestURI is the path and query, for a non-resource request (the
	// API server's /openid/v1/jwks) the only thing naming it.
	RequestURI string `json:"requestURI"`
	ObjectRef  struct {
		Resource    string `json:"resource"`
		Namespace   string `json:"namespace"`
		Name        string `json:"name"`
		Subresource string `json:"subresource"`
	} `json:"objectRef"`
	RequestReceived time.Time `json:"requestReceivedTimestamp"`
	ResponseStatus  struct {
		Code int `json:"code"`
	} `json:"responseStatus"`
	// RequestObject is there only where the policy logs requests
	// (test/framework/cluster's does for TokenRequests).
	RequestObject json.RawMessage `json:"requestObject"`
}

// Unstored reports whether e is a create the API server answers without
// storing anything: a TokenRequest (serviceaccounts/token: it signs a token
// and returns it), a TokenReview or an access review (it computes an answer
// and returns it). Nothing reaches etcd, nothing is left to list or watch.
func Unstored(e Event) bool {
	if e.Verb != "create" {
		return false
	}
	switch e.ObjectRef.Resource {
	case "tokenreviews", "subjectaccessreviews", "localsubjectaccessreviews",
		"selfsubjectaccessreviews", "selfsubjectrulesreviews", "selfsubjectreviews":
		return true
	}
	return e.IsTokenRequest()
}

// Nodeconfigs reports whether e came from one of nodeconfig's clients
// (their user agents are nodeconfig-SERVICE).
func (e Event) Nodeconfigs() bool { return strings.HasPrefix(e.UserAgent, "nodeconfig-") }

// IsTokenRequest reports whether e asks for a ServiceAccount's token (a
// create of serviceaccounts/token).
func (e Event) IsTokenRequest() bool {
	return e.Verb == "create" && e.ObjectRef.Resource == "serviceaccounts" && e.ObjectRef.Subresource == "token"
}

// Count returns how many completed requests match.
func Count(path string, match func(Event) bool) (int, error) {
	n := 0
	err := Each(path, func(e Event) {
		if match(e) {
			n++
		}
	})
	return n, err
}

// Each calls f with every completed request in the audit log at path, in
// the log's order.
func Each(path string, f func(Event)) error {
	file, err := os.Open(path)
	if err != nil {
		return err
	}
	defer file.Close()
	sc := bufio.NewScanner(file)
	sc.Buffer(make([]byte, 1<<20), 16<<20)
	for sc.Scan() {
		var e Event
		if json.Unmarshal(sc.Bytes(), &e) != nil || e.Stage != "ResponseComplete" {
			continue
		}
		f(e)
	}
	return sc.Err()
}

// EachRequest calls f once with every request the API server has begun to
// answer, in the log's order: a watch still open (logged at
// ResponseStarted) as well as every completed request.
func EachRequest(path string, f func(Event)) error {
	file, err := os.Open(path)
	if err != nil {
		return err
	}
	defer file.Close()
	seen := map[string]bool{}
	sc := bufio.NewScanner(file)
	sc.Buffer(make([]byte, 1<<20), 16<<20)
	for sc.Scan() {
		var e Event
		if json.Unmarshal(sc.Bytes(), &e) != nil || e.Stage != "ResponseStarted" && e.Stage != "ResponseComplete" || seen[e.AuditID] {
			continue
		}
		seen[e.AuditID] = true
		f(e)
	}
	return sc.Err()
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
// by a nodeconfig-* user agent) by kind. Unstored are its creates that
// store nothing (see Unstored): TokenRequests, TokenReviews, access reviews.
type WriteCounts struct{ Statusd, Events, NodeConfig, Leases, Other, Unstored int }

// Minus is the writes since o.
func (w WriteCounts) Minus(o WriteCounts) WriteCounts {
	return WriteCounts{w.Statusd - o.Statusd, w.Events - o.Events, w.NodeConfig - o.NodeConfig, w.Leases - o.Leases, w.Other - o.Other,
		w.Unstored - o.Unstored}
}

// Total is the writes that store something, per node: lease renewals are
// left out (per replica, not per node), and so are the creates that store
// nothing (Unstored). Those cost the API server a signature or a review,
// no object in etcd and no watch event; they are counted apart, and the
// tests that meet them (authentication) report them.
func (w WriteCounts) Total() int { return w.Statusd + w.Events + w.NodeConfig + w.Other }

// add counts e if it is one of nodeconfig's writes.
func (w *WriteCounts) add(e Event) {
	if e.Stage != "ResponseComplete" {
		return
	}
	switch e.Verb {
	case "create", "update", "patch", "delete":
	default:
		return
	}
	switch {
	case !e.Nodeconfigs():
	case Unstored(e):
		w.Unstored++
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
}

// CountWrites counts nodeconfig's writes in the audit log at path.
func CountWrites(path string) (WriteCounts, error) {
	return NewLog(path).Writes()
}

// Log counts nodeconfig's writes in an audit log as it grows: each read
// goes on from where the last one stopped, so polling a fleet's log stays
// cheap.
type Log struct {
	path   string
	offset int64 // the end of the last whole line counted
	counts WriteCounts
}

// NewLog counts the audit log at path (the API server's --audit-log-path).
func NewLog(path string) *Log { return &Log{path: path} }

// Writes returns nodeconfig's writes in the whole log so far. A line the
// API server is still writing is left for the next read.
func (l *Log) Writes() (WriteCounts, error) {
	f, err := os.Open(l.path)
	if err != nil {
		return l.counts, err
	}
	defer f.Close()
	if fi, err := f.Stat(); err != nil {
		return l.counts, err
	} else if fi.Size() < l.offset {
		// Truncated or replaced: count it again from the start.
		l.offset, l.counts = 0, WriteCounts{}
	}
	if _, err := f.Seek(l.offset, io.SeekStart); err != nil {
		return l.counts, err
	}
	r := bufio.NewReaderSize(f, 1<<20)
	for {
		line, err := r.ReadBytes('\n')
		if err == io.EOF {
			return l.counts, nil
		}
		if err != nil {
			return l.counts, err
		}
		l.offset += int64(len(line))
		var e Event
		if json.Unmarshal(line, &e) == nil {
			l.counts.add(e)
		}
	}
}

// Settled waits until nodeconfig's writes (lease renewals aside: they go
// on) have stopped coming, none for quiet, and returns the counts then:
// every write caused by what came before the call is in them. It gives up
// after timeout, returning the counts so far and an error.
//
// The quiet period is the only time in it: what it waits for is the log
// itself, polled every 25 ms, not a guess at how long trailing writes take.
func (l *Log) Settled(quiet, timeout time.Duration) (WriteCounts, error) {
	last, err := l.Writes()
	if err != nil {
		return last, err
	}
	stableSince := time.Now()
	deadline := time.Now().Add(timeout)
	tick := time.NewTicker(25 * time.Millisecond)
	defer tick.Stop()
	for {
		w, err := l.Writes()
		if err != nil {
			return w, err
		}
		if w.Total() != last.Total() {
			stableSince = time.Now()
		}
		last = w
		if time.Since(stableSince) >= quiet {
			return last, nil
		}
		if time.Now().After(deadline) {
			return last, fmt.Errorf("nodeconfig's API writes did not stop for %v within %v (%d so far, leases aside)", quiet, timeout, last.Total())
		}
		<-tick.C
	}
}

// Settle is the quiet period the tests give Settled: twice the longest
// pause nodeconfig makes between the writes of one change (statusd holds a
// settling state back up to 1 s, the reconciler groups NodeConfig status
// writes over 1 s).
const Settle = 2 * time.Second

// TokenRequest is one completed TokenRequest in the audit log.
type TokenRequest struct {
	At        time.Time // when the API server received it
	Account   string    // the ServiceAccount, NAMESPACE/NAME
	UserAgent string
	Code      int      // the response's HTTP status
	Audiences []string // empty unless the policy logs the request
}

// TokenRequests returns the completed TokenRequests (create
// serviceaccounts/token) in the audit log at path, in the log's order.
// Their audiences are there where the policy logs the request body, as
// test/framework/cluster's does for TokenRequests alone (the response,
// which holds the token, is never logged).
func TokenRequests(path string) ([]TokenRequest, error) {
	var out []TokenRequest
	err := Each(path, func(e Event) {
		if !e.IsTokenRequest() {
			return
		}
		tr := TokenRequest{At: e.RequestReceived, Account: e.ObjectRef.Namespace + "/" + e.ObjectRef.Name, UserAgent: e.UserAgent, Code: e.ResponseStatus.Code}
		var body struct {
			Spec struct {
				Audiences []string `json:"audiences"`
			} `json:"spec"`
		}
		if len(e.RequestObject) > 0 && json.Unmarshal(e.RequestObject, &body) == nil {
			tr.Audiences = body.Spec.Audiences
		}
		out = append(out, tr)
	})
	return out, err
}
