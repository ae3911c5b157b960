package main

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/klog/v2"

	"github.com/leader-elector/leader-elector/election"
	"github.com/leader-elector/leader-elector/httpapi"
	"github.com/leader-elector/leader-elector/routing"
)

// rolloutCheckTimeout bounds the startup check of the owning Deployment.
const rolloutCheckTimeout = 10 * time.Second

// routingClient builds the client for routing writes and the startup
// check: like the Lease client, a request timeout of half the renew
// deadline, which the API server also applies to the request.
func routingClient(cfg *rest.Config, renewDeadline time.Duration) (kubernetes.Interface, error) {
	return sideClient(cfg, "leader-elector-routing", renewDeadline/2)
}

// sideClient builds a client of its own, with its own rate limits, for
// requests that must never hold up a renewal of the Lease.
func sideClient(cfg *rest.Config, userAgent string, timeout time.Duration) (kubernetes.Interface, error) {
	c := rest.CopyConfig(cfg)
	rest.AddUserAgent(c, userAgent)
	c.Timeout = timeout
	cs, err := kubernetes.NewForConfig(c)
	if err != nil {
		return nil, fmt.Errorf("build %s client: %w", userAgent, err)
	}
	return cs, nil
}

// checkLeaderLabel, in label mode, refuses a --leader-label that this pod
// already carries with another value or that its controller selects pods
// by (routing.CheckLeaderLabel): an error, so the sidecar exits 1 before it
// takes part in the election. A check that cannot be made (the API server
// does not answer) is logged and skipped: the label writer refuses to
// overwrite a value it did not write all the same.
func checkLeaderLabel(ctx context.Context, opts *options, client kubernetes.Interface) error {
	if routing.Mode(opts.Routing.Mode) != routing.ModeLabel {
		return nil
	}
	cctx, cancel := context.WithTimeout(ctx, rolloutCheckTimeout)
	defer cancel()
	err := routing.CheckLeaderLabel(cctx, client, opts.LeaseNamespace, opts.Identity, opts.Routing.LeaderLabel)
	switch {
	case errors.Is(err, routing.ErrLeaderLabelTaken):
		return fmt.Errorf("--leader-label=%s: %w", opts.Routing.LeaderLabel, err)
	case err != nil:
		klog.FromContext(ctx).Info("Cannot check the leader label against this pod and its controller", "label", opts.Routing.LeaderLabel, "err", err)
	}
	return nil
}

// startRouting starts the router of --route, if any, and returns a channel
// closed once it has stopped (after withdrawing this pod on shutdown).
func startRouting(ctx context.Context, opts *options, client kubernetes.Interface, elector *election.Elector, reg prometheus.Registerer) (<-chan struct{}, error) {
	done := make(chan struct{})
	router, err := routing.New(routing.Config{
		Mode:        routing.Mode(opts.Routing.Mode),
		Namespace:   opts.LeaseNamespace,
		PodName:     opts.Identity,
		LeaseName:   opts.LeaseName,
		Service:     opts.Routing.Service,
		PodIP:       opts.Routing.PodIP,
		LeaderLabel: opts.Routing.LeaderLabel,
		Client:      client,
		Leadership:  elector,
		Resync:      opts.LeaseDuration,
		MaxBackoff:  opts.RetryPeriod,
	})
	if err != nil || router == nil {
		close(done)
		return done, err
	}
	for _, c := range router.Metrics().Collectors() {
		if err := reg.Register(c); err != nil {
			close(done)
			return done, fmt.Errorf("register routing metrics: %w", err)
		}
	}
	go func() {
		defer close(done)
		router.Run(ctx)
	}()
	return done, nil
}

// reportStartup logs, in one line, what the timings guarantee, and in
// --readiness=leader mode checks in the background whether the owning
// Deployment can complete a rollout.
func reportStartup(ctx context.Context, opts *options, client kubernetes.Interface) {
	logger := klog.FromContext(ctx)
	g := opts.electionConfig().Guarantees()
	logger.Info("Guarantees of these timings",
		"crashTakeoverWithin", g.CrashTakeover,
		"clockDriftMargin", fmt.Sprintf("%.0f%%", 100*g.ClockDriftMargin),
		"apiOutageSurvived", g.APIOutageSurvived,
		"apiOutageSurvivedUpTo", opts.RenewDeadline,
		"route", opts.Routing.Mode,
	)
	if httpapi.Readiness(opts.Readiness) != httpapi.ReadyWhenLeader {
		return
	}
	go func() {
		cctx, cancel := context.WithTimeout(ctx, rolloutCheckTimeout)
		defer cancel()
		check, err := routing.CheckRollout(cctx, client, opts.LeaseNamespace, opts.Identity)
		switch {
		case apierrors.IsForbidden(err):
			// Optional: the shipped RBAC does not grant it.
			logger.Info("Not checking whether the Deployment can complete a rollout with readiness=leader: the ServiceAccount may not read the pod, its ReplicaSet and Deployment (get on pods, replicasets, deployments)")
		case err != nil:
			logger.Info("Cannot check whether the Deployment can complete a rollout with readiness=leader", "err", err)
		case check.Problem != "":
			logger.Info("WARNING: the Deployment cannot complete a rollout with readiness=leader", "deployment", klog.KRef(opts.LeaseNamespace, check.Deployment), "problem", check.Problem)
		case check.Deployment != "":
			logger.V(2).Info("The Deployment's strategy can complete a rollout with readiness=leader", "deployment", klog.KRef(opts.LeaseNamespace, check.Deployment))
		}
	}()
}
