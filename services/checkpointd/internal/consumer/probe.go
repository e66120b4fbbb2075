package consumer

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"strings"
	"time"
)

// Prober asks the consumer's health endpoint (for the kubelet,
// http://127.0.0.1:10248/healthz). An empty URL means always healthy.
type Prober struct {
	URL    string
	Client *http.Client
}

// Probe reports whether the consumer answers 2xx, and in its own words what
// it said (the body of a failed answer, or why there was none).
func (p Prober) Probe(ctx context.Context) (healthy bool, detail string) {
	if p.URL == "" {
		return true, ""
	}
	client := p.Client
	if client == nil {
		client = &http.Client{Timeout: 2 * time.Second}
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, p.URL, nil)
	if err != nil {
		return false, err.Error()
	}
	resp, err := client.Do(req)
	if err != nil {
		return false, fmt.Sprintf("no answer from %s: %v", p.URL, unwrapURLError(err))
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(io.LimitReader(resp.Body, 512))
	said := strings.TrimSpace(string(body))
	if resp.StatusCode/100 != 2 {
		return false, fmt.Sprintf("%s answered %s: %s", p.URL, resp.Status, said)
	}
	return true, said
}

func unwrapURLError(err error) error {
	for {
		u, ok := err.(interface{ Unwrap() error })
		if !ok || u.Unwrap() == nil {
			return err
		}
		// Keep the innermost cause ("connection refused"), not the URL again.
		err = u.Unwrap()
	}
}
