// Command demo shows leader-elector at work on a local control plane (etcd
// and kube-apiserver built from source and started on loopback), on an
// existing cluster when KUBECONFIG (or -kubeconfig) names one, or, with
// -local, on a lease file (--lease-store=file:) with no control plane at
// all: three candidates race for one Lease, each with a supervised child
// (leader-elector run) that runs only while its candidate leads; the app's
// event stream sees its term end on a release, the leader is then stopped
// gracefully, then killed, and the demo prints who leads at every step.
// With -hold it keeps running until Ctrl-C so you can kill candidates
// yourself (their PIDs are printed). On an existing cluster the candidates
// run here, as processes, with that kubeconfig's credentials, in a
// namespace of their own that the demo creates and deletes.
//
// It is a demo and a smoke test, not part of what ships.
package main

import (
	"context"
	"flag"
	"fmt"
	"io"
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
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"

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
	kubeconfig := flag.String("kubeconfig", os.Getenv("KUBECONFIG"), "run on the cluster of this kubeconfig (default $KUBECONFIG) instead of building and starting a local control plane")
	local := flag.Bool("local", false, "elect through a lease file (--lease-store=file:) instead of a Kubernetes Lease: no control plane, no cluster")
	flag.Parse()
	if flag.NArg() > 0 {
		fmt.Fprintf(os.Stderr, "demo: unexpected arguments %q\n", flag.Args())
		os.Exit(2)
	}
	if *local {
		*kubeconfig = "" // a KUBECONFIG in the environment does not matter here
	}
	if err := run(*hold, *local, *kubeconfig); err != nil {
		fmt.Fprintln(os.Stderr, "demo failed:", err)
		os.Exit(1)
	}
}

// target is the cluster the demo runs on, or the lease file.
type target struct {
	client     kubernetes.Interface // nil on a lease file
	kubeconfig string               // for the candidates
	leaseFile  string               // instead of a kubeconfig, with -local
	namespace  string               // of the Lease
	host       string
}

func run(hold, local bool, kubeconfig string) error {
	ctx, cancel := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer cancel()

	work, err := os.MkdirTemp("", "leader-elector-demo-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(work)

	binary := filepath.Join(work, "leader-elector")
	if err := building(ctx, "leader-elector (go build)", func() error {
		return harness.BuildBinary(ctx, binary, harness.Build{Output: os.Stderr})
	}); err != nil {
		return fmt.Errorf("build leader-elector: %w", err)
	}
	tg, cleanup, err := chooseTarget(ctx, kubeconfig, local, work)
	if err != nil {
		return err
	}
	defer cleanup()

	var g harness.Group[*harness.Candidate]
	defer g.KillAll()
	if err := startCandidates(ctx, &g, binary, tg, work); err != nil {
		return err
	}
	children, err := superviseAll(g.Members(), binary, work)
	defer children.stop()
	if err != nil {
		return err
	}
	last, err := handOver(ctx, &g, tg, children)
	if err != nil {
		return err
	}
	// The children's last lines come before what follows.
	children.stop()
	if !hold {
		target := "make demo"
		if local {
			target = "make demo-local"
		}
		say("Done. Run with HOLD=1 (%s HOLD=1) to keep the candidates running and kill them yourself.", target)
		return nil
	}
	var held harness.Group[*harness.Candidate]
	defer held.KillAll()
	if err := restartStopped(ctx, &g, &held, binary, tg, work); err != nil {
		return err
	}
	showAccess(&held, tg, binary)
	holdOn(ctx, &held, last)
	return nil
}

// restartStopped adds to held the candidates of g that still run and,
// started again under their names, those the script stopped: all three, to
// explore.
func restartStopped(ctx context.Context, g, held *harness.Group[*harness.Candidate], binary string, tg target, work string) error {
	for _, c := range g.Members() {
		if c.Running() {
			held.Add(c)
			continue
		}
		again, err := startCandidate(ctx, c.Name(), binary, tg, work)
		if err != nil {
			return err
		}
		held.Add(again)
	}
	return nil
}

// showAccess prints how to reach the held candidates: the kubeconfig, each
// API, and commands to try.
func showAccess(g *harness.Group[*harness.Candidate], tg target, binary string) {
	if tg.leaseFile != "" {
		say("All three candidates run again. The lease file: %s", tg.leaseFile)
	} else {
		say("All three candidates run again. The kubeconfig: %s (Lease %s/%s)", tg.kubeconfig, tg.namespace, leaseName)
	}
	for _, c := range g.Members() {
		say("%s (pid %d): curl -s %s/leader   or   LEADER_ELECTOR_URL=%s %s status", c.Name(), c.Pid(), c.APIURL(), c.APIURL(), binary)
	}
	say("Try: kill -STOP <pid> (a frozen leader), kill -9 <pid>, curl -s -X POST <url>/release, curl -sN <url>/events")
}

// chooseTarget is a lease file in work with local, the cluster of
// kubeconfig if one is named, or else a local control plane built and
// started in work. cleanup undoes what it set up.
func chooseTarget(ctx context.Context, kubeconfig string, local bool, work string) (tg target, cleanup func(), err error) {
	if local {
		tg = target{leaseFile: filepath.Join(work, "lease.json"), namespace: "default"}
		say("No control plane: the candidates elect through the lease file %s (--lease-store=file:, one machine only); timings: lease %v, renew deadline %v, retry %v", tg.leaseFile, leaseDuration, renewDeadline, retryPeriod)
		return tg, func() {}, nil
	}
	if kubeconfig != "" {
		tg, cleanup, err = existingCluster(ctx, kubeconfig, work)
		if err != nil {
			return target{}, nil, err
		}
		say("Using the cluster at %s (kubeconfig %s); no control plane is built. Lease %s/%s; timings: lease %v, renew deadline %v, retry %v", tg.host, kubeconfig, tg.namespace, leaseName, leaseDuration, renewDeadline, retryPeriod)
		return tg, cleanup, nil
	}
	var binDir string
	if err := building(ctx, "etcd and kube-apiserver", func() (err error) {
		binDir, err = cluster.EnsureBinaries(ctx, os.Stderr)
		return err
	}); err != nil {
		return target{}, nil, err
	}
	cp, err := cluster.Start(ctx, cluster.Options{BinDir: binDir, WorkDir: filepath.Join(work, "cluster")})
	if err != nil {
		return target{}, nil, err
	}
	tg = target{client: cp.AdminClient(), kubeconfig: cp.AdminKubeconfig(), namespace: "default", host: cp.Host()}
	say("Control plane ready at %s; Lease default/%s; timings: lease %v, renew deadline %v, retry %v", cp.Host(), leaseName, leaseDuration, renewDeadline, retryPeriod)
	return tg, cp.Stop, nil
}

// startCandidates starts the three candidates, pod-a to pod-c, into g.
func startCandidates(ctx context.Context, g *harness.Group[*harness.Candidate], binary string, tg target, work string) error {
	for _, name := range []string{"pod-a", "pod-b", "pod-c"} {
		c, err := startCandidate(ctx, name, binary, tg, work)
		if err != nil {
			return err
		}
		g.Add(c)
	}
	return nil
}

// startCandidate starts one candidate; its log is work/name.log (begun
// anew when the candidate is started again).
func startCandidate(ctx context.Context, name, binary string, tg target, work string) (*harness.Candidate, error) {
	c, err := harness.StartCandidate(ctx, harness.CandidateOptions{
		Binary:     binary,
		Name:       name,
		Lease:      leaseName,
		Namespace:  tg.namespace,
		Kubeconfig: tg.kubeconfig,
		LeaseFile:  tg.leaseFile,
		Timings:    timings,
		LogPath:    filepath.Join(work, name+".log"),
		HTTPClient: &http.Client{Timeout: 2 * time.Second},
	})
	if err != nil {
		return nil, err
	}
	say("Started %s (pid %d), its API at %s/leader", name, c.Pid(), c.APIURL())
	return c, nil
}

// handOver is the demo's script: the first election, a graceful handover
// (SIGTERM to the leader), a crash failover (SIGKILL to the next), and the
// Events the sidecars recorded. It returns the last leader.
func handOver(ctx context.Context, g *harness.Group[*harness.Candidate], tg target, children *supervisors) (*harness.Candidate, error) {
	say("The Lease is new, with no holder's history: the first leader takes it a lease duration (%v) after the candidates first see it, since a holder of an earlier Lease could still claim it", leaseDuration)
	leader, err := g.WaitLeader(ctx, 30*time.Second)
	if err != nil {
		return nil, err
	}
	show(ctx, g)
	say("The fencing token counts from the seconds since 2026-01-01 at the Lease's creation, so a re-created Lease never goes back")
	if err := children.waitStarted(ctx, leader.Name()); err != nil {
		return nil, err
	}

	if leader, err = releaseWatched(ctx, g, children, leader); err != nil {
		return nil, err
	}

	say("Graceful handover: SIGTERM to the leader %s", leader.Name())
	sent := time.Now()
	if err := leader.Signal(syscall.SIGTERM); err != nil {
		return nil, err
	}
	next, err := g.WaitLeader(ctx, leaseDuration+5*time.Second, leader)
	if err != nil {
		return nil, err
	}
	code, err := leader.WaitExit(ctx, exitTimeout)
	if err != nil {
		return nil, err
	}
	say("%s exited with code %d; %s leads %v after the SIGTERM", leader.Name(), code, next.Name(), time.Since(sent).Round(time.Millisecond))
	show(ctx, g)
	if err := children.waitStarted(ctx, next.Name()); err != nil {
		return nil, err
	}

	say("Crash: SIGKILL to the leader %s; the others wait for the Lease to expire (%v)", next.Name(), leaseDuration)
	killed := time.Now()
	if err := next.Signal(syscall.SIGKILL); err != nil {
		return nil, err
	}
	third, err := g.WaitLeader(ctx, leaseDuration+5*time.Second, next)
	if err != nil {
		return nil, err
	}
	say("%s leads %v after the SIGKILL", third.Name(), time.Since(killed).Round(time.Millisecond))
	show(ctx, g)
	if err := children.waitStarted(ctx, third.Name()); err != nil {
		return nil, err
	}
	say("%s's supervisor saw no renewal from its killed sidecar: it stopped its child --stop-grace before the claim it knew ran out, so before %s could lead", next.Name(), third.Name())
	if tg.client == nil {
		say("The lease file keeps no Kubernetes Events; each candidate's log is beside it in %s", filepath.Dir(tg.leaseFile))
		return third, nil
	}
	return third, showEvents(ctx, tg, third.Name())
}

// holdOn says who leads whenever it changes, until Ctrl-C, while the user
// kills candidates.
func holdOn(ctx context.Context, g *harness.Group[*harness.Candidate], leader *harness.Candidate) {
	say("Holding: kill %s (pid %d) yourself and watch; Ctrl-C ends the demo", leader.Name(), leader.Pid())
	var last string
	tick := time.NewTicker(200 * time.Millisecond)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
		if line := summary(ctx, g); line != last {
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
func showEvents(ctx context.Context, tg target, lastLeader string) error {
	var events []corev1.Event
	err := wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, 5*time.Second, true, func(ctx context.Context) (bool, error) {
		list, err := tg.client.CoreV1().Events(tg.namespace).List(ctx, metav1.ListOptions{
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

// show says who leads and whom the others see.
func show(ctx context.Context, g *harness.Group[*harness.Candidate]) { say("%s", summary(ctx, g)) }

func summary(ctx context.Context, g *harness.Group[*harness.Candidate]) string {
	var parts []string
	for _, c := range g.Members() {
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

// out is where the demo tells its story.
var out io.Writer = os.Stdout

func say(format string, args ...any) {
	fmt.Fprintf(out, "%s  %s\n", time.Now().Format("15:04:05.000"), fmt.Sprintf(format, args...))
}

// existingCluster connects to the cluster of kubeconfig (a path or a
// KUBECONFIG list) and creates the demo's namespace there. The candidates
// get one self-contained copy of the kubeconfig (their --kubeconfig takes
// one file). cleanup deletes the namespace, Lease and Events with it.
func existingCluster(ctx context.Context, kubeconfig, work string) (target, func(), error) {
	rules := &clientcmd.ClientConfigLoadingRules{Precedence: filepath.SplitList(kubeconfig)}
	loader := clientcmd.NewNonInteractiveDeferredLoadingClientConfig(rules, &clientcmd.ConfigOverrides{})
	raw, err := loader.RawConfig()
	if err != nil {
		return target{}, nil, fmt.Errorf("kubeconfig %s: %w", kubeconfig, err)
	}
	if err := clientcmdapi.MinifyConfig(&raw); err != nil {
		return target{}, nil, fmt.Errorf("kubeconfig %s: %w", kubeconfig, err)
	}
	if err := clientcmdapi.FlattenConfig(&raw); err != nil {
		return target{}, nil, fmt.Errorf("kubeconfig %s: %w", kubeconfig, err)
	}
	path := filepath.Join(work, "kubeconfig")
	if err := clientcmd.WriteToFile(raw, path); err != nil {
		return target{}, nil, err
	}
	cfg, err := loader.ClientConfig()
	if err != nil {
		return target{}, nil, fmt.Errorf("kubeconfig %s: %w", kubeconfig, err)
	}
	client, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return target{}, nil, err
	}
	ns, err := client.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{
		GenerateName: "leader-elector-demo-",
		Labels:       map[string]string{"app.kubernetes.io/name": "leader-elector-demo"},
	}}, metav1.CreateOptions{})
	if err != nil {
		return target{}, nil, fmt.Errorf("creating the demo's namespace on %s: %w", cfg.Host, err)
	}
	cleanup := func() {
		// The demo's context may be cancelled (Ctrl-C): clean up regardless.
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		if err := client.CoreV1().Namespaces().Delete(ctx, ns.Name, metav1.DeleteOptions{}); err != nil {
			fmt.Fprintf(os.Stderr, "demo: deleting namespace %s: %v (delete it yourself)\n", ns.Name, err)
			return
		}
		say("Deleted namespace %s", ns.Name)
	}
	return target{client: client, kubeconfig: path, namespace: ns.Name, host: cfg.Host}, cleanup, nil
}

// progressEvery is how often building says that a build still runs.
var progressEvery = 10 * time.Second

// building runs build and, while it runs, says every progressEvery what is
// being built and for how long, so that a cold build (minutes) does not
// look hung.
func building(ctx context.Context, what string, build func() error) error {
	start := time.Now()
	say("Building %s", what)
	done := make(chan struct{})
	stopped := make(chan struct{})
	go func() {
		defer close(stopped)
		tick := time.NewTicker(progressEvery)
		defer tick.Stop()
		for {
			select {
			case <-done:
				return
			case <-ctx.Done():
				return
			case <-tick.C:
				say("  still building %s: %v elapsed", what, time.Since(start).Round(time.Second))
			}
		}
	}()
	err := build()
	close(done)
	<-stopped // no progress line after the outcome
	if err == nil {
		say("Built %s in %v", what, time.Since(start).Round(100*time.Millisecond))
	}
	return err
}
