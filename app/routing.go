package app

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/client-go/kubernetes"
	"k8s.io/klog/v2"

	"github.com/leader-elector/leader-elector/election"
	"github.com/leader-elector/leader-elector/httpapi"
	"github.com/leader-elector/leader-elector/routing"
)

// rolloutCheckTimeout bounds the startup check of the owning Deployment.
const rolloutCheckTimeout = 10 * time.Second

// checkLeaderLabel, in label mode, refuses a --leader-label that this pod
// already carries with another value or that its controller selects pods
// by (routing.CheckLeaderLabel): an error, so the sidecar exits 1 before it
// takes part in the election. A check that cannot be made (the API server
// does not answer) is logged and skipped: the label writer refuses to
// overwrite a value it did not write all the same.
func checkLeaderLabel(ctx context.Context, rcfg routing.Config, client kubernetes.Interface) error {
	if rcfg.Mode != routing.ModeLabel {
		return nil
	}
	cctx, cancel := context.WithTimeout(ctx, rolloutCheckTimeout)
	defer cancel()
	err := routing.CheckLeaderLabel(cctx, client, rcfg.Namespace, rcfg.PodName, rcfg.LeaderLabel)
	switch {
	case errors.Is(err, routing.ErrLeaderLabelTaken):
		return fmt.Errorf("--leader-label=%s: %w", rcfg.LeaderLabel, err)
	case err != nil:
		klog.FromContext(ctx).Error(err, "Cannot check the leader label against this pod and its controller", "label", rcfg.LeaderLabel)
	}
	return nil
}

// startRouting starts the router of --route, if any, and returns a channel
// closed once it has stopped (after withdrawing this pod on shutdown).
func startRouting(ctx context.Context, rcfg routing.Config, client kubernetes.Interface, elector *election.Elector, reg prometheus.Registerer) (<-chan struct{}, error) {
	done := make(chan struct{})
	rcfg.Client = client
	if elector != nil {
		// Partition mode has no elector, and no routing (options refuses
		// both together); a nil *Elector would be a non-nil interface.
		rcfg.Leadership = elector
	}
	router, err := routing.New(rcfg)
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
func reportStartup(ctx context.Context, cfg Config, client kubernetes.Interface) {
	logger := klog.FromContext(ctx)
	e := cfg.Election
	g := e.Guarantees()
	logger.Info("Guarantees of these timings",
		"crashTakeoverWithin", g.CrashTakeover,
		"clockDriftMargin", fmt.Sprintf("%.0f%%", 100*g.ClockDriftMargin),
		"apiOutageSurvived", g.APIOutageSurvived,
		"apiOutageSurvivedUpTo", e.RenewDeadline,
		"route", cfg.Routing.Mode,
	)
	if cfg.Client.LeaseFile != "" {
		// No API server, no Deployment: nothing more to report.
		return
	}
	// In the background: a slow answer must not delay the election.
	go reportServerVersion(ctx, client.Discovery())
	if cfg.Readiness != httpapi.ReadyWhenLeader {
		return
	}
	go func() {
		cctx, cancel := context.WithTimeout(ctx, rolloutCheckTimeout)
		defer cancel()
		check, err := routing.CheckRollout(cctx, client, e.Namespace, e.Identity)
		switch {
		case apierrors.IsForbidden(err):
			// Optional: the shipped RBAC does not grant it.
			logger.Info("Not checking whether the Deployment can complete a rollout with readiness=leader: the ServiceAccount may not read the pod, its ReplicaSet and Deployment (get on pods, replicasets, deployments)")
		case err != nil:
			logger.Error(err, "Cannot check whether the Deployment can complete a rollout with readiness=leader")
		case check.Problem != "":
			// An error without an error value: the configuration, not a
			// request, is what is wrong, and a rollout will wait forever.
			logger.Error(nil, "The Deployment cannot complete a rollout with readiness=leader", "deployment", klog.KRef(e.Namespace, check.Deployment), "problem", check.Problem)
		case check.Deployment != "":
			logger.V(2).Info("The Deployment's strategy can complete a rollout with readiness=leader", "deployment", klog.KRef(e.Namespace, check.Deployment))
		}
	}()
}
