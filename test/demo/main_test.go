package main

import (
	"context"
	"errors"
	"regexp"
	"strings"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/util/wait"

	"github.com/leader-elector/leader-elector/test/harness"
)

// TestBuildingSaysProgress: while a build runs, the demo says what it
// builds and how long it has been running, again and again; then that it
// is done, or nothing more when the build failed.
func TestBuildingSaysProgress(t *testing.T) {
	buf := &harness.SyncBuffer{}
	out, progressEvery = buf, 20*time.Millisecond
	t.Cleanup(func() { out, progressEvery = nil, 10*time.Second })

	release := make(chan struct{})
	done := make(chan error)
	go func() {
		done <- building(context.Background(), "kube-apiserver", func() error { <-release; return nil })
	}()
	// The build ends once two progress lines have been said.
	if err := wait.PollUntilContextTimeout(context.Background(), 5*time.Millisecond, 10*time.Second, true, func(context.Context) (bool, error) {
		return strings.Count(buf.String(), "still building kube-apiserver: ") >= 2, nil
	}); err != nil {
		t.Fatalf("no progress lines:\n%s", buf)
	}
	close(release)
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	text := buf.String()
	for _, re := range []string{`Building kube-apiserver\n`, `still building kube-apiserver: [0-9.]+m?s elapsed\n`, `Built kube-apiserver in [0-9.]+m?s\n$`} {
		if !regexp.MustCompile(re).MatchString(text) {
			t.Errorf("output does not match %q:\n%s", re, text)
		}
	}

	boom := errors.New("boom")
	if err := building(context.Background(), "etcd", func() error { return boom }); !errors.Is(err, boom) {
		t.Errorf("building returned %v, want the build's error", err)
	}
	if strings.Contains(buf.String(), "Built etcd") {
		t.Errorf("a failed build was reported built:\n%s", buf)
	}
}
