// Command baseline is the yardstick of the benchmarks in bench/: the smallest
// honest program built on client-go's tools/leaderelection with a plain
// resourcelock.LeaseLock, configured like leader-elector (same timings,
// ReleaseOnCancel, its own clientset with a request timeout of half the renew
// deadline) and exposing its state the same way, so both can be measured by
// the same harness:
//
//	GET /leader → {"identity": "...", "holder": "...", "isLeader": true, "leaderSince": "..."}
//
// isLeader is set from OnStartedLeading and cleared from OnStoppedLeading, as
// client-go's documentation suggests, with one correction that any careful
// user makes: on SIGTERM it is cleared before the context is cancelled,
// because client-go releases the Lease (ReleaseOnCancel) before it calls
// OnStoppedLeading, and a program that still answered "leader" after the
// release would share leadership with its successor.
//
// It is a benchmark tool, not part of what ships.
package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/signal"
	"sync"
	"syscall"
	"time"

	"github.com/spf13/pflag"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/client-go/tools/leaderelection"
	"k8s.io/client-go/tools/leaderelection/resourcelock"
	"k8s.io/klog/v2"
)

// userAgent tells the baseline's requests apart from leader-elector's
// ("leader-election") in the API server's audit log.
const userAgent = "baseline"

type options struct {
	Kubeconfig     string
	LeaseName      string
	LeaseNamespace string
	Identity       string
	LeaseDuration  time.Duration
	RenewDeadline  time.Duration
	RetryPeriod    time.Duration
	HTTPAddress    string
}

func (o *options) addFlags(fs *pflag.FlagSet) {
	fs.StringVar(&o.Kubeconfig, "kubeconfig", "", "kubeconfig file (required)")
	fs.StringVar(&o.LeaseName, "lease-name", "", "name of the Lease (required)")
	fs.StringVar(&o.LeaseNamespace, "lease-namespace", "default", "namespace of the Lease")
	fs.StringVar(&o.Identity, "identity", "", "this candidate's holder identity (required)")
	fs.DurationVar(&o.LeaseDuration, "lease-duration", 15*time.Second, "LeaderElectionConfig.LeaseDuration")
	fs.DurationVar(&o.RenewDeadline, "renew-deadline", 10*time.Second, "LeaderElectionConfig.RenewDeadline")
	fs.DurationVar(&o.RetryPeriod, "retry-period", 2*time.Second, "LeaderElectionConfig.RetryPeriod")
	fs.StringVar(&o.HTTPAddress, "http-address", "127.0.0.1:4040", "address of GET /leader")
}

// validate checks what client-go's NewLeaderElector does not.
func (o *options) validate() error {
	var errs []error
	for flag, v := range map[string]string{"kubeconfig": o.Kubeconfig, "lease-name": o.LeaseName, "identity": o.Identity} {
		if v == "" {
			errs = append(errs, fmt.Errorf("--%s is required", flag))
		}
	}
	if _, _, err := net.SplitHostPort(o.HTTPAddress); err != nil {
		errs = append(errs, fmt.Errorf("--http-address: %w", err))
	}
	return errors.Join(errs...)
}

func main() {
	opts := &options{}
	fs := pflag.NewFlagSet("baseline", pflag.ContinueOnError)
	opts.addFlags(fs)
	if err := fs.Parse(os.Args[1:]); err != nil {
		os.Exit(2)
	}
	if err := opts.validate(); err != nil {
		fmt.Fprintf(os.Stderr, "baseline: %v\n", err)
		os.Exit(2)
	}
	st := &state{identity: opts.Identity}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	sigs := make(chan os.Signal, 2)
	signal.Notify(sigs, syscall.SIGTERM, syscall.SIGINT)
	go func() {
		<-sigs
		// Stop claiming first, then let client-go release the Lease.
		st.stop()
		cancel()
		<-sigs
		os.Exit(1)
	}()
	if err := run(ctx, opts, st); err != nil {
		fmt.Fprintf(os.Stderr, "baseline: %v\n", err)
		os.Exit(1)
	}
}

// run serves GET /leader and takes part in the election until ctx ends.
func run(ctx context.Context, opts *options, st *state) error {
	cfg, err := clientcmd.BuildConfigFromFlags("", opts.Kubeconfig)
	if err != nil {
		return fmt.Errorf("load kubeconfig: %w", err)
	}
	// As resourcelock.NewFromKubeconfig does.
	cfg.Timeout = opts.RenewDeadline / 2
	rest.AddUserAgent(cfg, userAgent)
	client, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return fmt.Errorf("build client: %w", err)
	}

	ln, err := net.Listen("tcp", opts.HTTPAddress)
	if err != nil {
		return fmt.Errorf("listen on %s: %w", opts.HTTPAddress, err)
	}
	mux := http.NewServeMux()
	mux.HandleFunc("GET /leader", st.serveLeader)
	srv := &http.Server{
		Handler:           mux,
		ReadHeaderTimeout: 5 * time.Second,
		ReadTimeout:       10 * time.Second,
		WriteTimeout:      10 * time.Second,
		IdleTimeout:       90 * time.Second,
		MaxHeaderBytes:    16 << 10,
	}
	serveErr := make(chan error, 1)
	go func() { serveErr <- srv.Serve(ln) }()

	le, err := leaderelection.NewLeaderElector(leaderelection.LeaderElectionConfig{
		Lock: &resourcelock.LeaseLock{
			LeaseMeta:  metav1.ObjectMeta{Namespace: opts.LeaseNamespace, Name: opts.LeaseName},
			Client:     client.CoordinationV1(),
			LockConfig: resourcelock.ResourceLockConfig{Identity: opts.Identity},
		},
		LeaseDuration:   opts.LeaseDuration,
		RenewDeadline:   opts.RenewDeadline,
		RetryPeriod:     opts.RetryPeriod,
		ReleaseOnCancel: true,
		Name:            opts.LeaseName,
		Callbacks: leaderelection.LeaderCallbacks{
			OnStartedLeading: func(context.Context) { st.setLeader(true) },
			OnStoppedLeading: func() { st.setLeader(false) },
		},
	})
	if err != nil {
		_ = srv.Close()
		return fmt.Errorf("leader elector: %w", err)
	}
	// The holder is read from the elector at each request: OnNewLeader
	// runs on a goroutine per change and could report them out of order.
	st.setHolderSource(le.GetLeader)
	// client-go's Run returns when it loses the Lease; like leader-elector,
	// stay a candidate until told to stop.
	for ctx.Err() == nil {
		le.Run(ctx)
	}

	shutdownCtx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := srv.Shutdown(shutdownCtx); err != nil {
		return fmt.Errorf("shut down HTTP server: %w", err)
	}
	if err := <-serveErr; !errors.Is(err, http.ErrServerClosed) {
		return fmt.Errorf("HTTP server: %w", err)
	}
	klog.Flush()
	return nil
}

// state is what GET /leader reports.
type state struct {
	identity string

	mu          sync.Mutex
	stopped     bool
	isLeader    bool
	holder      func() string
	leaderSince time.Time
}

type leaderJSON struct {
	Identity    string     `json:"identity"`
	Holder      string     `json:"holder"`
	IsLeader    bool       `json:"isLeader"`
	LeaderSince *time.Time `json:"leaderSince,omitempty"`
}

func (s *state) setLeader(leading bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if leading && !s.stopped {
		s.isLeader, s.leaderSince = true, time.Now()
		return
	}
	s.isLeader = false
}

func (s *state) setHolderSource(holder func() string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.holder = holder
}

func (s *state) stop() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.stopped, s.isLeader = true, false
}

func (s *state) serveLeader(w http.ResponseWriter, _ *http.Request) {
	s.mu.Lock()
	out := leaderJSON{Identity: s.identity, IsLeader: s.isLeader}
	if s.isLeader {
		since := s.leaderSince
		out.LeaderSince = &since
	}
	holder := s.holder
	s.mu.Unlock()
	if holder != nil {
		out.Holder = holder()
	}
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(out)
}
