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
	"encoding/json"
	"flag"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"syscall"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"

	"github.com/leader-elector/leader-elector/test/cluster"
)

// Demo timings: shorter than the defaults (15s/10s/2s) so that a crash
// failover takes seconds, with the same safety ratios.
const (
	leaseDuration = 6 * time.Second
	renewDeadline = 4 * time.Second
	retryPeriod   = time.Second
	leaseName     = "demo"
)

type candidate struct {
	name string
	url  string
	cmd  *exec.Cmd
	done chan struct{}
	code int
}

type leaderState struct {
	Holder       string `json:"holder"`
	IsLeader     bool   `json:"isLeader"`
	FencingToken int64  `json:"fencingToken"`
	Revision     uint64 `json:"revision"`
}

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
	build := exec.CommandContext(ctx, "go", "build", "-o", binary, ".")
	build.Dir = repoRoot()
	build.Stdout, build.Stderr = os.Stderr, os.Stderr
	if err := build.Run(); err != nil {
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

	var candidates []*candidate
	defer func() {
		for _, c := range candidates {
			_ = c.cmd.Process.Kill()
			<-c.done
		}
	}()
	for _, name := range []string{"pod-a", "pod-b", "pod-c"} {
		c, err := start(binary, name, cp.AdminKubeconfig(), filepath.Join(work, name+".log"))
		if err != nil {
			return err
		}
		candidates = append(candidates, c)
		say("Started %s (pid %d), its API at %s/leader", name, c.cmd.Process.Pid, c.url)
	}

	say("The Lease is new, with no holder's history: the first leader takes it a lease duration (%v) after the candidates first see it, since a holder of an earlier Lease could still claim it", leaseDuration)
	leader, err := waitLeader(ctx, candidates, nil, 30*time.Second)
	if err != nil {
		return err
	}
	show(candidates)
	say("The fencing token counts from the seconds since 2026-01-01 at the Lease's creation, so a re-created Lease never goes back")

	say("Graceful handover: SIGTERM to the leader %s", leader.name)
	sent := time.Now()
	_ = leader.cmd.Process.Signal(syscall.SIGTERM)
	next, err := waitLeader(ctx, candidates, leader, leaseDuration+5*time.Second)
	if err != nil {
		return err
	}
	<-leader.done
	say("%s exited with code %d; %s leads %v after the SIGTERM", leader.name, leader.code, next.name, time.Since(sent).Round(time.Millisecond))
	show(candidates)

	say("Crash: SIGKILL to the leader %s; the others wait for the Lease to expire (%v)", next.name, leaseDuration)
	killed := time.Now()
	_ = next.cmd.Process.Kill()
	third, err := waitLeader(ctx, candidates, next, leaseDuration+5*time.Second)
	if err != nil {
		return err
	}
	say("%s leads %v after the SIGKILL", third.name, time.Since(killed).Round(time.Millisecond))
	show(candidates)
	if err := showEvents(ctx, cp, third.name); err != nil {
		return err
	}

	if !hold {
		say("Done. Run with HOLD=1 (make demo HOLD=1) to keep the candidates running and kill them yourself.")
		return nil
	}
	say("Holding: kill %s (pid %d) yourself and watch; Ctrl-C ends the demo", third.name, third.cmd.Process.Pid)
	var last string
	tick := time.NewTicker(200 * time.Millisecond)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-tick.C:
		}
		if line := summary(candidates); line != last {
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
	for deadline := time.Now().Add(5 * time.Second); ; {
		list, err := cp.AdminClient().CoreV1().Events("default").List(ctx, metav1.ListOptions{
			FieldSelector: fields.Set{"involvedObject.kind": "Lease", "involvedObject.name": leaseName}.String(),
		})
		if err != nil {
			return fmt.Errorf("list the Lease's Events: %w", err)
		}
		events = list.Items
		recorded := slices.ContainsFunc(events, func(e corev1.Event) bool { return strings.HasPrefix(e.Message, lastLeader+" became leader") })
		if recorded || time.Now().After(deadline) {
			break
		}
		time.Sleep(100 * time.Millisecond)
	}
	// Names end in the recording time in nanoseconds (hexadecimal).
	slices.SortFunc(events, func(a, b corev1.Event) int { return strings.Compare(a.Name, b.Name) })
	say("Events on the Lease (kubectl describe lease %s):", leaseName)
	for _, e := range events {
		say("  %s %s %s: %s", e.Type, e.Reason, e.Source.Component, e.Message)
	}
	return nil
}

func start(binary, name, kubeconfig, logPath string) (*candidate, error) {
	ports, err := freePorts(2)
	if err != nil {
		return nil, err
	}
	logFile, err := os.Create(logPath)
	if err != nil {
		return nil, err
	}
	c := &candidate{name: name, url: fmt.Sprintf("http://127.0.0.1:%d", ports[0]), done: make(chan struct{})}
	c.cmd = exec.Command(binary,
		"--lease-name="+leaseName,
		"--identity="+name,
		"--kubeconfig="+kubeconfig,
		"--lease-duration="+leaseDuration.String(),
		"--renew-deadline="+renewDeadline.String(),
		"--retry-period="+retryPeriod.String(),
		fmt.Sprintf("--http-address=127.0.0.1:%d", ports[0]),
		fmt.Sprintf("--probe-address=127.0.0.1:%d", ports[1]),
	)
	c.cmd.Stdout, c.cmd.Stderr = logFile, logFile
	// The demo's own LEADER_ELECTOR_* variables (the tool cache's) are no
	// settings of the sidecar, which refuses unknown ones.
	c.cmd.Env = slices.DeleteFunc(os.Environ(), func(kv string) bool { return strings.HasPrefix(kv, "LEADER_ELECTOR_") })
	c.cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := c.cmd.Start(); err != nil {
		return nil, err
	}
	go func() {
		_ = c.cmd.Wait()
		c.code = c.cmd.ProcessState.ExitCode()
		logFile.Close()
		close(c.done)
	}()
	return c, nil
}

func (c *candidate) alive() bool {
	select {
	case <-c.done:
		return false
	default:
		return true
	}
}

func (c *candidate) state() (leaderState, error) {
	var s leaderState
	client := http.Client{Timeout: 2 * time.Second}
	resp, err := client.Get(c.url + "/leader")
	if err != nil {
		return s, err
	}
	defer resp.Body.Close()
	return s, json.NewDecoder(resp.Body).Decode(&s)
}

// waitLeader waits until a live candidate other than not reports isLeader.
func waitLeader(ctx context.Context, cs []*candidate, not *candidate, timeout time.Duration) (*candidate, error) {
	deadline := time.Now().Add(timeout)
	for time.Now().Before(deadline) {
		for _, c := range cs {
			if c == not || !c.alive() {
				continue
			}
			if s, err := c.state(); err == nil && s.IsLeader {
				return c, nil
			}
		}
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-time.After(20 * time.Millisecond):
		}
	}
	return nil, fmt.Errorf("no leader within %v", timeout)
}

func show(cs []*candidate) { say("%s", summary(cs)) }

func summary(cs []*candidate) string {
	var parts []string
	for _, c := range cs {
		if !c.alive() {
			parts = append(parts, c.name+": gone")
			continue
		}
		s, err := c.state()
		switch {
		case err != nil:
			parts = append(parts, c.name+": no answer")
		case s.IsLeader:
			parts = append(parts, fmt.Sprintf("%s: LEADER (fencing token %d)", c.name, s.FencingToken))
		default:
			holder := s.Holder
			if holder == "" {
				holder = "nobody"
			}
			parts = append(parts, fmt.Sprintf("%s: follower (sees %s)", c.name, holder))
		}
	}
	return strings.Join(parts, " | ")
}

func say(format string, args ...any) {
	fmt.Printf("%s  %s\n", time.Now().Format("15:04:05.000"), fmt.Sprintf(format, args...))
}

func freePorts(n int) ([]int, error) {
	var ports []int
	for range n {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return nil, err
		}
		defer l.Close()
		ports = append(ports, l.Addr().(*net.TCPAddr).Port)
	}
	return ports, nil
}

func repoRoot() string {
	_, file, _, _ := runtime.Caller(0)
	return filepath.Clean(filepath.Join(filepath.Dir(file), "..", ".."))
}
