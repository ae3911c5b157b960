package health

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"time"
)

// thresholds turns single probe results into a health state the way the
// kubelet's probes do: failures consecutive failures make a healthy app
// unhealthy, successes consecutive successes make an unhealthy app healthy.
// It starts unhealthy: a pod campaigns only once its app has answered.
type thresholds struct {
	failures, successes int
	healthy             bool
	// run counts the consecutive results that disagree with healthy.
	run int
}

// record adds one result and reports whether the state changed.
func (t *thresholds) record(ok bool) bool {
	if ok == t.healthy {
		t.run = 0
		return false
	}
	t.run++
	need := t.failures
	if ok {
		need = t.successes
	}
	if t.run < need {
		return false
	}
	t.healthy, t.run = ok, 0
	return true
}

// probe asks url once: any 2xx answer within the client's timeout is a
// success. The body is drained (bounded) so that the connection is reused.
func probe(ctx context.Context, client *http.Client, url string) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return err
	}
	resp, err := client.Do(req)
	if err != nil {
		return err
	}
	_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 64<<10))
	_ = resp.Body.Close()
	if resp.StatusCode < 200 || resp.StatusCode > 299 {
		return fmt.Errorf("GET %s answered %s", url, resp.Status)
	}
	return nil
}

// newProbeClient returns the client of the health probes: no redirects
// (a redirect could lead the sidecar off the loopback address it was
// given), no proxy from the environment, and a timeout.
func newProbeClient(timeout time.Duration) *http.Client {
	return &http.Client{
		Timeout:   timeout,
		Transport: &http.Transport{Proxy: nil, DisableCompression: true, MaxIdleConns: 1, IdleConnTimeout: time.Minute},
		CheckRedirect: func(*http.Request, []*http.Request) error {
			return http.ErrUseLastResponse
		},
	}
}
