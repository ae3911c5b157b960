//go:build integration

package node_test

import (
	"bufio"
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/wait"

	"github.com/leader-elector/leader-elector/test/packaging"
)

// podLogs follows the sidecar's log of every pod of a deployment, from
// each pod's start until the test ends: a failure in a rolling update
// happens at pods that are gone by the time the test looks, and the
// kubelet deletes their logs with them.
type podLogs struct {
	mu    sync.Mutex
	lines map[string][]logLine
}

type logLine struct {
	at   time.Time
	text string
}

// followLogs starts following d's sidecar logs until the test ends.
func (d *deployment) followLogs(t *testing.T) *podLogs {
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	t.Cleanup(func() { cancel(); wg.Wait() })
	l := &podLogs{lines: map[string][]logLine{}}
	following := map[string]bool{}
	wg.Go(func() {
		_ = wait.PollUntilContextCancel(ctx, 100*time.Millisecond, true, func(ctx context.Context) (bool, error) {
			pods, err := d.pods(ctx)
			if err != nil {
				return false, nil
			}
			for _, p := range pods {
				if following[p.Name] || !sidecarStarted(p) {
					continue
				}
				following[p.Name] = true
				wg.Go(func() { l.follow(ctx, d, p.Name) })
			}
			return false, nil
		})
	})
	return l
}

func sidecarStarted(p corev1.Pod) bool {
	for _, s := range p.Status.ContainerStatuses {
		if s.Name == packaging.SidecarName && (s.State.Running != nil || s.State.Terminated != nil) {
			return true
		}
	}
	return false
}

// follow streams one pod's sidecar log until it ends or ctx does.
func (l *podLogs) follow(ctx context.Context, d *deployment, pod string) {
	stream, err := d.client.CoreV1().Pods(d.namespace).GetLogs(pod, &corev1.PodLogOptions{Container: packaging.SidecarName, Follow: true, Timestamps: true}).Stream(ctx)
	if err != nil {
		l.add(pod, logLine{time.Now(), fmt.Sprintf("(cannot follow the log: %v)", err)})
		return
	}
	defer stream.Close()
	sc := bufio.NewScanner(stream)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		// "2026-12-04T17:51:02.513456789Z message", by Timestamps.
		stampText, text, _ := strings.Cut(sc.Text(), " ")
		at, err := time.Parse(time.RFC3339Nano, stampText)
		if err != nil {
			at, text = time.Now(), sc.Text()
		}
		l.add(pod, logLine{at, text})
	}
}

func (l *podLogs) add(pod string, line logLine) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.lines[pod] = append(l.lines[pod], line)
}

// between logs, for every pod, its lines from from to to that speak of
// the proxy or of leading, at most max per pod.
func (l *podLogs) between(t *testing.T, from, to time.Time, max int) {
	t.Helper()
	l.mu.Lock()
	defer l.mu.Unlock()
	for pod, lines := range l.lines {
		var picked []string
		for _, line := range lines {
			if line.at.Before(from) || line.at.After(to) {
				continue
			}
			if s := line.text; strings.Contains(s, "roxy") || strings.Contains(s, "lead") || strings.Contains(s, "elease") || strings.Contains(s, "hutting") || strings.Contains(s, "Stopped") {
				picked = append(picked, stamp(line.at)+" "+s)
			}
		}
		if len(picked) > max {
			picked = append(picked[:max], fmt.Sprintf("… %d more", len(picked)-max))
		}
		t.Logf("sidecar of %s, %s to %s (%d lines about the proxy and leading):\n%s", pod, stamp(from), stamp(to), len(picked), strings.Join(picked, "\n"))
	}
}
