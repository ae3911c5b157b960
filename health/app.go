package health

import (
	"context"
	"errors"
	"sync"
	"time"

	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/klog/v2"
)

// AppProbe probes the app alone, with leader mode's probe and thresholds
// but without the candidates Lease: partition mode's health gating, whose
// members publish their health on their own membership Leases and move
// partitions by the group's rules (package partition).
type AppProbe struct {
	url      string
	period   time.Duration
	onChange func()
	prober   urlProber

	mu      sync.Mutex
	th      thresholds
	lastErr error
}

// NewAppProbe returns a probe of url every period (each timing out after
// half of it): failures consecutive failures make the app unhealthy,
// successes consecutive successes healthy again; it starts unhealthy.
// onChange is called (from Run's goroutine) when the app's health changes.
func NewAppProbe(url string, period time.Duration, failures, successes int, onChange func()) (*AppProbe, error) {
	if url == "" || period <= 0 || failures < 1 || successes < 1 {
		return nil, errors.New("health: an app probe needs a URL, and a positive period, failures and successes")
	}
	return &AppProbe{
		url:      url,
		period:   period,
		onChange: onChange,
		prober:   urlProber{url: url, client: newProbeClient(period / 2)},
		th:       thresholds{failures: failures, successes: successes},
		lastErr:  errors.New("the app has not answered its health probe yet"),
	}, nil
}

// Run probes the app every period until ctx ends.
func (p *AppProbe) Run(ctx context.Context) {
	logger := klog.FromContext(ctx)
	wait.UntilWithContext(ctx, func(ctx context.Context) {
		pctx, cancel := context.WithTimeout(ctx, p.period/2)
		err := p.prober.probe(pctx)
		cancel()
		if ctx.Err() != nil {
			return
		}
		p.mu.Lock()
		if err != nil {
			p.lastErr = err
		}
		changed := p.th.record(err == nil)
		healthy := p.th.healthy
		p.mu.Unlock()
		if changed {
			if healthy {
				logger.Info("The app is healthy", "url", p.url)
			} else {
				logger.Info("The app is unhealthy", "url", p.url, "err", err.Error())
			}
			p.onChange()
		}
	}, p.period)
}

// Healthy reports the app's health, and while unhealthy the last probe's
// error.
func (p *AppProbe) Healthy() (bool, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.th.healthy {
		return true, nil
	}
	return false, p.lastErr
}
