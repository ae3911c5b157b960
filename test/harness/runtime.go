package harness

import (
	"context"
	"fmt"
	"net/http"

	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
)

// RuntimeGauges are the Go runtime's gauges that the memory measurements
// read from a sidecar's /metrics: what its goroutines, stacks and heap are.
var RuntimeGauges = []string{"go_goroutines", "go_threads", "go_memstats_heap_inuse_bytes", "go_memstats_stack_inuse_bytes", "go_gc_gogc_percent"}

// RuntimeMetrics reads RuntimeGauges from the /metrics at url (parsed with
// expfmt, as Prometheus would); each must be there.
func RuntimeMetrics(ctx context.Context, client *http.Client, url string) (map[string]float64, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return nil, err
	}
	resp, err := client.Do(req)
	if err != nil {
		return nil, err
	}
	defer func() { _ = resp.Body.Close() }()
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("GET %s: status %d", url, resp.StatusCode)
	}
	parser := expfmt.NewTextParser(model.UTF8Validation)
	families, err := parser.TextToMetricFamilies(resp.Body)
	if err != nil {
		return nil, fmt.Errorf("GET %s: %w", url, err)
	}
	out := map[string]float64{}
	for _, name := range RuntimeGauges {
		f, ok := families[name]
		if !ok || len(f.GetMetric()) != 1 || f.GetMetric()[0].GetGauge() == nil {
			return nil, fmt.Errorf("GET %s: no gauge %s in the answer", url, name)
		}
		out[name] = f.GetMetric()[0].GetGauge().GetValue()
	}
	return out, nil
}
