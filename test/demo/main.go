// Command demo shows leader-elector at work on a local control plane (etcd
// and kube-apiserver built from source and started on loopback): three
// candidates race for one Lease, the leader is stopped gracefully, then
// killed, and the demo prints who leads at every step. With -hold it keeps
// running until Ctrl-C so you can kill candidates yourself (their PIDs are
// printed).
//
// It is a demo and a smoke test, not part of what ships.
package main

import (
	"context"
	"flag"
	"fmt"
	"net/http"
	"os"
	"os/signal"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/util/wait"

	"github.com/leader-elector/leader-elector/test/cluster"
	"github.com/leader-elector/leader-elector/test/harness"
)

// Demo timings: shorter than the defaults (15s/10s/2s) so that a crash
// failover takes seconds, with the same safety ratios.
const (
	leaseDuration = 6 * time.Second
	renewDeadline = 4 * time.Second
	retryPeriod   = time.Second
	leaseName     = "demo"
	// exitTimeout bounds a graceful exit, so that a hung sidecar fails the
	// demo instead of stalling it: a bound, not a target.
	exitTimeout = 30 * time.Second
)

// timings are the demo timings, as the harness takes them.
var timings = harness.Timings{LeaseDuration: leaseDuration, RenewDeadline: renewDeadline, RetryPeriod: retryPeriod}

func main() {
	hold := flag.Bool("hold", false, "keep running after the scripted handovers, until Ctrl-C")
	flag.Parse()
	if err := run(*hold); err != nil {
		fmt.Fprintln(os.Stderr, "demo failed:", err)
		os.Exit(1)
	}
}

func run(hold bool) error {
	ctx, cancel := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer cancel()

	work, err := os.MkdirTemp("", "leader-elector-demo-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(work)

	say("Building leader-elector and the control plane (the first run builds kube-apiserver from source: several minutes)")
	binary := filepath.Join(work, "leader-elector")
	if err := harness.BuildBinary(ctx, binary, harness.Build{Output: os.Stderr}); err != nil {
		return fmt.Errorf("build leader-elector: %w", err)
	}
	binDir, err := cluster.EnsureBinaries(ctx, os.Stderr)
	if err != nil {
		return err
	}
	cp, err := cluster.Start(ctx, cluster.Options{BinDir: binDir, WorkDir: filepath.Join(work, "cluster")})
	if err != nil {
		return err
	}
	defer cp.Stop()
	say("Control plane ready at %s; Lease default/%s; timings: lease %v, renew deadline %v, retry %v", cp.Host(), leaseName, leaseDuration, renewDeadline, retryPeriod)

	var candidates []*harness.Candidate
	defer func() {
		for _, c := range candidates {
			c.Kill()
		}
	}()
	for _, name := range []string{"pod-a", "pod-b", "pod-c"} {
		c, err := harness.StartCandidate(ctx, harness.CandidateOptions{
			Binary:     binary,
			Name:       name,
			Lease:      leaseName,
			Kubeconfig: cp.AdminKubeconfig(),
			Timings:    timings,
			LogPath:    filepath.Join(work, name+".log"),
			HTTPClient: &http.Client{Timeout: 2 * time.Second},
		})
		if err != nil {
			return err
		}
		candidates = append(candidates, c)
		say("Started %s (pid %d), its API at %s/leader", name, c.Pid(), c.APIURL())
	}

	say("The Lease is new, with no holder's history: the first leader takes it a lease duration (%v) after the candidates first see it, since a holder of an earlier Lease could still claim it", leaseDuration)
	leader, err := waitLeader(ctx, candidates, nil, 30*time.Second)
	if err != nil {
		return err
	}
	show(ctx, candidates)
	say("The fencing token counts from the seconds since 2026-01-01 at the Lease's creation, so a re-created Lease never goes back")

	say("Graceful handover: SIGTERM to the leader %s", leader.Name())
	sent := time.Now()
	if err := leader.Signal(syscall.SIGTERM); err != nil {
		return err
	}
	next, err := waitLeader(ctx, candidates, leader, leaseDuration+5*time.Second)
	if err != nil {
		return err
	}
	code, err := leader.WaitExit(ctx, exitTimeout)
	if err != nil {
		return err
	}
	say("%s exited with code %d; %s leads %v after the SIGTERM", leader.Name(), code, next.Name(), time.Since(sent).Round(time.Millisecond))
	show(ctx, candidates)

	say("Crash: SIGKILL to the leader %s; the others wait for the Lease to expire (%v)", next.Name(), leaseDuration)
	killed := time.Now()
	if err := next.Signal(syscall.SIGKILL); err != nil {
		return err
	}
	third, err := waitLeader(ctx, candidates, next, leaseDuration+5*time.Second)
	if err != nil {
		return err
	}
	say("%s leads %v after the SIGKILL", third.Name(), time.Since(killed).Round(time.Millisecond))
	show(ctx, candidates)
	if err := showEvents(ctx, cp, third.Name()); err != nil {
		return err
	}

	if !hold {
		say("Done. Run with HOLD=1 (make demo HOLD=1) to keep the candidates running and kill them yourself.")
		return nil
	}
	say("Holding: kill %s (pid %d) yourself and watch; Ctrl-C ends the demo", third.Name(), third.Pid())
	var last string
	tick := time.NewTicker(200 * time.Millisecond)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-tick.C:
		}
		if line := summary(ctx, candidates); line != last {
			say("%s", line)
			last = line
		}
	}
}

// showEvents prints the Events the sidecars recorded on the Lease, as
// `kubectl describe lease` lists them, once the last leader's "became
// leader" is among them (it is written a moment after it leads). The
// crashed leader could not record its "stopped leading"; the one that left
// gracefully did.
func showEvents(ctx context.Context, cp *cluster.ControlPlane, lastLeader string) error {
	var events []corev1.Event
	err := wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, 5*time.Second, true, func(ctx context.Context) (bool, error) {
		list, err := cp.AdminClient().CoreV1().Events("default").List(ctx, metav1.ListOptions{
			FieldSelector: fields.Set{"involvedObject.kind": "Lease", "involvedObject.name": leaseName}.String(),
		})
		if err != nil {
			return false, fmt.Errorf("list the Lease's Events: %w", err)
		}
		events = list.Items
		return slices.ContainsFunc(events, func(e corev1.Event) bool { return strings.HasPrefix(e.Message, lastLeader+" became leader") }), nil
	})
	// Not yet recorded after 5 s: show what there is.
	if err != nil && !wait.Interrupted(err) {
		return err
	}
	// Names end in the recording time in nanoseconds (hexadecimal).
	slices.SortFunc(events, func(a, b corev1.Event) int { return strings.Compare(a.Name, b.Name) })
	say("Events on the Lease (kubectl describe lease %s):", leaseName)
	for _, e := range events {
		say("  %s %s %s: %s", e.Type, e.Reason, e.Source.Component, e.Message)
	}
	return nil
}

// waitLeader waits until a live candidate other than not reports isLeader.
func waitLeader(ctx context.Context, cs []*harness.Candidate, not *harness.Candidate, timeout time.Duration) (*harness.Candidate, error) {
	var leader *harness.Candidate
	err := wait.PollUntilContextTimeout(ctx, 20*time.Millisecond, timeout, true, func(ctx context.Context) (bool, error) {
		for _, c := range cs {
			if c == not || !c.Running() {
				continue
			}
			if s, err := c.API().Leader(ctx); err == nil && s.IsLeader {
				leader = c
				return true, nil
			}
		}
		return false, nil
	})
	if err != nil {
		return nil, fmt.Errorf("no leader within %v: %w", timeout, err)
	}
	return leader, nil
}

func show(ctx context.Context, cs []*harness.Candidate) { say("%s", summary(ctx, cs)) }

func summary(ctx context.Context, cs []*harness.Candidate) string {
	var parts []string
	for _, c := range cs {
		if !c.Running() {
			parts = append(parts, c.Name()+": gone")
			continue
		}
		s, err := c.API().Leader(ctx)
		switch {
		case err != nil:
			parts = append(parts, c.Name()+": no answer")
		case s.IsLeader:
			parts = append(parts, fmt.Sprintf("%s: LEADER (fencing token %d)", c.Name(), s.FencingToken))
		default:
			holder := s.Holder
			if holder == "" {
				holder = "nobody"
			}
			parts = append(parts, fmt.Sprintf("%s: follower (sees %s)", c.Name(), holder))
		}
	}
	return strings.Join(parts, " | ")
}

func say(format string, args ...any) {
	fmt.Printf("%s  %s\n", time.Now().Format("15:04:05.000"), fmt.Sprintf(format, args...))
}
