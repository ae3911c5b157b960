// Command bench measures leader-elector against a baseline — the smallest
// program built on client-go's tools/leaderelection (bench/baseline) — on a
// real control plane (etcd + kube-apiserver from test/cluster), in the same
// run, and prints one table with the targets of issue 6:
//
//   - graceful handover: SIGTERM of the leader → another candidate answers
//     isLeader: true;
//   - crash failover: SIGKILL of the leader, measured from the old leader's
//     last renewal (the Lease's renewTime, recorded by a watch) to the new
//     holder's acquireTime, and whether anyone took the Lease before the old
//     leader's claim had run out;
//   - API requests per second of an idle follower and of the leader, from the
//     API server's audit log (one service account per candidate), cross-checked
//     against apiserver_request_total;
//   - GET /leader throughput and latency on loopback, with and without SSE
//     clients attached;
//   - resident memory and CPU of idle candidates, from /proc.
//
// An invariant monitor (the e2e suite's checks: no two claims overlap, no
// claim past its validUntil, fencing tokens only grow) asks every candidate
// for its state during the handover and crash phases; any violation makes
// the run fail.
//
// With --partitions=N it measures partition mode instead (bench/partitions.go):
// time to a full and fair assignment after a join and after a crash, and the
// members' API requests while idle (`make bench-partitions`,
// `make bench-partitions-smoke`).
//
// Run it with `make bench` (defaults: lease 15s, renew 10s, retry 2s, 3
// candidates; about 12 minutes) or `make bench-smoke` (short timings and
// counts, to prove it still works). It is a benchmark, not part of what
// ships; nothing imports it.
package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/spf13/pflag"

	"github.com/leader-elector/leader-elector/leasetimings"
	"github.com/leader-elector/leader-elector/partition"
)

// options configures a benchmark run.
type options struct {
	LeaseDuration time.Duration
	RenewDeadline time.Duration
	RetryPeriod   time.Duration
	// Candidates race for each implementation's Lease.
	Candidates int
	// Handovers and Crashes are the rounds of each kind per implementation.
	Handovers int
	Crashes   int
	// PollInterval is how often the monitor asks every candidate for its
	// state during handovers and crashes; it bounds the resolution of the
	// handover figure.
	PollInterval time.Duration
	// IdleWarmup passes before, and IdleWindow is, the idle measurement.
	IdleWarmup time.Duration
	IdleWindow time.Duration
	// HTTPDuration is each GET /leader load run; HTTPConns its keep-alive
	// connections; SSEClients the /events streams attached in the second run.
	HTTPDuration time.Duration
	HTTPConns    int
	SSEClients   int
	// HandoverSSE /events streams are attached to every leader-elector
	// candidate during the handover rounds (issue 19: handover and memory
	// with many streaming clients).
	HandoverSSE    int
	HandoverSSEOne bool
	// HealthGating runs the leader-elector candidates with health gating
	// (an app health URL the bench serves, always healthy; the candidates
	// Lease created for them): a release names its successor and a crash
	// takeover is ranked (docs/api.md, "The named successor").
	HealthGating bool
	// Output, if set, also receives the table (markdown).
	Output string
	// Partitions > 0 runs the partition-mode benchmark instead (see
	// bench/partitions.go) with PartitionMembers members and
	// PartitionRounds joins and crashes.
	Partitions       int
	PartitionMembers int
	PartitionRounds  int
	// PartitionDrainTimeout is every member's --drain-timeout. The
	// members have no app to release a draining partition, so with a
	// drain timeout every rebalance that moves a partition waits for it.
	PartitionDrainTimeout time.Duration
	// PartitionBurst > 0 measures first a burst join: one member owns
	// every partition, then PartitionBurst members start one after
	// another, timed from the first one's start to the full and fair
	// assignment (it replaces the start measure).
	PartitionBurst int
	// PartitionAck gives every member an app that acknowledges a drain at
	// once (POST /partitions/<i>/release in the partition's term), as a
	// `leader-elector run --partitions` child that exits on SIGTERM does.
	PartitionAck bool
	// ProxyBench runs the proxy benchmark instead (bench/proxy.go), with
	// Proxy's counts; it needs no control plane.
	ProxyBench bool
	Proxy      proxyOptions
	// LocalBench runs the local lease store's benchmark instead
	// (bench/local.go); it needs no control plane.
	LocalBench bool
	// KeepWorkDir keeps logs, kubeconfigs and the audit log after a
	// successful run too (a failed run always keeps them).
	KeepWorkDir bool
}

func defaultOptions() *options {
	return &options{
		LeaseDuration: 15 * time.Second,
		RenewDeadline: 10 * time.Second,
		RetryPeriod:   2 * time.Second,
		Candidates:    3,
		Handovers:     60,
		Crashes:       10,
		PollInterval:  5 * time.Millisecond,
		IdleWarmup:    10 * time.Second,
		IdleWindow:    90 * time.Second,
		HTTPDuration:  10 * time.Second,
		HTTPConns:     16,
		SSEClients:    100,

		PartitionMembers: 8,
		PartitionRounds:  3,

		Proxy: proxyOptions{Samples: 20000, NewConnSamples: 2000, Conns: 1000, IdleClients: 10000, Bytes: 1 << 30},
	}
}

func (o *options) addFlags(fs *pflag.FlagSet) {
	fs.DurationVar(&o.LeaseDuration, "lease-duration", o.LeaseDuration, "lease duration of every candidate (whole seconds)")
	fs.DurationVar(&o.RenewDeadline, "renew-deadline", o.RenewDeadline, "renew deadline of every candidate")
	fs.DurationVar(&o.RetryPeriod, "retry-period", o.RetryPeriod, "retry period of every candidate")
	fs.IntVar(&o.Candidates, "candidates", o.Candidates, "candidates per implementation")
	fs.IntVar(&o.Handovers, "handovers", o.Handovers, "graceful handovers (SIGTERM of the leader) per implementation")
	fs.IntVar(&o.Crashes, "crashes", o.Crashes, "crash failovers (SIGKILL of the leader) per implementation")
	fs.DurationVar(&o.PollInterval, "poll-interval", o.PollInterval, "how often the monitor asks each candidate during handovers and crashes")
	fs.DurationVar(&o.IdleWarmup, "idle-warmup", o.IdleWarmup, "settling time before the idle measurement")
	fs.DurationVar(&o.IdleWindow, "idle-window", o.IdleWindow, "length of the idle measurement (API requests, CPU)")
	fs.DurationVar(&o.HTTPDuration, "http-duration", o.HTTPDuration, "length of each GET /leader load run")
	fs.IntVar(&o.HTTPConns, "http-conns", o.HTTPConns, "keep-alive connections of the GET /leader load")
	fs.IntVar(&o.SSEClients, "sse-clients", o.SSEClients, "/events clients attached during the second load run")
	fs.IntVar(&o.HandoverSSE, "handover-sse", o.HandoverSSE, "/events clients attached to every leader-elector candidate during the handovers (0: none)")
	fs.BoolVar(&o.HandoverSSEOne, "handover-sse-one", o.HandoverSSEOne, "with --handover-sse, attach the clients to one candidate at a time instead of to every one")
	fs.BoolVar(&o.HealthGating, "health-gating", o.HealthGating, "run the leader-elector candidates with health gating (an always healthy app the bench serves): a release names its successor, a crash takeover is ranked")
	fs.StringVar(&o.Output, "output", o.Output, "also write the table (markdown) to this file")
	fs.IntVar(&o.Partitions, "partitions", o.Partitions, "run the partition-mode benchmark instead, with this many partitions (0: the leader election benchmark)")
	fs.IntVar(&o.PartitionMembers, "partition-members", o.PartitionMembers, "members of the partition group once stable")
	fs.IntVar(&o.PartitionRounds, "partition-rounds", o.PartitionRounds, "joins and crashes measured in the partition benchmark")
	fs.DurationVar(&o.PartitionDrainTimeout, "partition-drain-timeout", o.PartitionDrainTimeout, "every member's --drain-timeout (without --partition-ack the members never release a draining partition themselves)")
	fs.BoolVar(&o.PartitionAck, "partition-ack", o.PartitionAck, "every member's app acknowledges a drain at once (POST /partitions/<i>/release), as a child of leader-elector run --partitions that exits on SIGTERM")
	fs.IntVar(&o.PartitionBurst, "partition-burst", o.PartitionBurst, "first measure a burst join: one member owns every partition, then this many start one after another (0: off)")
	fs.BoolVar(&o.ProxyBench, "proxy", o.ProxyBench, "run the forwarding proxy's benchmark instead: added latency, throughput and memory against a direct loopback connection")
	fs.IntVar(&o.Proxy.Samples, "proxy-samples", o.Proxy.Samples, "with --proxy: round trips timed on one keep-alive connection")
	fs.IntVar(&o.Proxy.NewConnSamples, "proxy-new-conn-samples", o.Proxy.NewConnSamples, "with --proxy: new connections timed")
	fs.IntVar(&o.Proxy.Conns, "proxy-conns", o.Proxy.Conns, "with --proxy: connections held open for the memory figure")
	fs.IntVar(&o.Proxy.IdleClients, "proxy-idle-clients", o.Proxy.IdleClients, "with --proxy: idle clients opened against a proxy with the default connection cap")
	fs.Int64Var(&o.Proxy.Bytes, "proxy-bytes", o.Proxy.Bytes, "with --proxy: bytes sent for the throughput figure")
	fs.StringVar(&o.Proxy.HAProxy, "proxy-haproxy", o.Proxy.HAProxy, "with --proxy: also measure this HAProxy binary (mode tcp, kernel splicing) in front of the same upstream, as the reference L4 proxy (empty: not measured)")
	fs.BoolVar(&o.LocalBench, "local", o.LocalBench, "run the local lease store's benchmark instead (--lease-store=file:): graceful handover, crash takeover and idle CPU of --candidates processes on one file, with the timings, --handovers and --crashes given")
	fs.BoolVar(&o.KeepWorkDir, "keep-workdir", o.KeepWorkDir, "keep the work directory (logs, audit log) after the run")
}

// validate checks every option on its own and reports all problems.
func (o *options) validate() error {
	var errs []error
	timings := leasetimings.Timings{LeaseDuration: o.LeaseDuration, RenewDeadline: o.RenewDeadline, RetryPeriod: o.RetryPeriod}
	errs = append(errs, timings.Check(leasetimings.FlagTimingNames)...)
	if o.PollInterval <= 0 {
		errs = append(errs, fmt.Errorf("--poll-interval must be positive, got %v", o.PollInterval))
	}
	if o.Candidates < 2 {
		errs = append(errs, fmt.Errorf("--candidates %d: need at least 2", o.Candidates))
	}
	if o.Handovers < 1 || o.Crashes < 1 {
		errs = append(errs, errors.New("--handovers and --crashes must be at least 1"))
	}
	if o.IdleWarmup < 0 || o.IdleWindow < time.Second {
		errs = append(errs, errors.New("--idle-warmup must be non-negative and --idle-window at least 1s"))
	}
	if o.HTTPDuration < 100*time.Millisecond || o.HTTPConns < 1 || o.SSEClients < 0 || o.HandoverSSE < 0 {
		errs = append(errs, errors.New("--http-duration must be at least 100ms, --http-conns at least 1, --sse-clients and --handover-sse non-negative"))
	}
	if o.Partitions < 0 || o.Partitions > 1024 || (o.Partitions > 0 && (o.PartitionMembers < 2 || o.PartitionRounds < 1)) {
		errs = append(errs, errors.New("--partitions must be within 0..1024, and with partitions --partition-members at least 2 and --partition-rounds at least 1"))
	}
	if o.PartitionDrainTimeout < 0 || o.PartitionDrainTimeout > partition.MaxDrainTimeout {
		errs = append(errs, fmt.Errorf("--partition-drain-timeout must be within 0..%v, got %v", partition.MaxDrainTimeout, o.PartitionDrainTimeout))
	}
	if o.PartitionBurst < 0 || (o.Partitions > 0 && o.PartitionBurst > o.PartitionMembers-2) {
		errs = append(errs, fmt.Errorf("--partition-burst must be within 0..--partition-members - 2 (one member is there first, and one joins in each round), got %d", o.PartitionBurst))
	}
	if o.Proxy.Samples < 100 || o.Proxy.NewConnSamples < 100 || o.Proxy.Conns < 1 || o.Proxy.Conns > 60000 || o.Proxy.IdleClients < 1 || o.Proxy.IdleClients > 60000 || o.Proxy.Bytes < 1<<20 {
		errs = append(errs, errors.New("--proxy-samples and --proxy-new-conn-samples must be at least 100, --proxy-conns and --proxy-idle-clients within 1..60000, --proxy-bytes at least 1 MiB"))
	}
	return errors.Join(errs...)
}

func main() {
	if len(os.Args) > 1 && os.Args[1] == sseReaderCommand {
		os.Exit(runSSEReaders(os.Args[2:]))
	}
	if len(os.Args) > 1 && os.Args[1] == proxyCommand {
		os.Exit(runProxyUnderTest(os.Args[2:]))
	}
	opts := defaultOptions()
	fs := pflag.NewFlagSet("bench", pflag.ContinueOnError)
	opts.addFlags(fs)
	if err := fs.Parse(os.Args[1:]); err != nil {
		if errors.Is(err, pflag.ErrHelp) {
			os.Exit(0)
		}
		os.Exit(2)
	}
	if err := opts.validate(); err != nil {
		fmt.Fprintf(os.Stderr, "bench: invalid options: %v\n", err)
		os.Exit(2)
	}
	ctx, cancel := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer cancel()
	runBench := run
	if opts.Partitions > 0 {
		runBench = runPartitions
	}
	if opts.ProxyBench {
		runBench = runProxy
	}
	if opts.LocalBench {
		runBench = runLocal
	}
	if err := runBench(ctx, opts); err != nil {
		fmt.Fprintf(os.Stderr, "bench: %v\n", err)
		cancel()
		os.Exit(1)
	}
}
