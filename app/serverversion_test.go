package app

import (
	"bytes"
	"errors"
	"strings"
	"testing"

	apiversion "k8s.io/apimachinery/pkg/version"
	"k8s.io/client-go/discovery"
	fakediscovery "k8s.io/client-go/discovery/fake"
	"k8s.io/client-go/kubernetes/fake"
	"k8s.io/klog/v2"
	"k8s.io/klog/v2/textlogger"
)

// TestReportServerVersion: the startup line names the API server's release
// and says when it is outside the supported range, whatever the provider's
// suffix; a version that cannot be read or parsed is an error line, not a
// stop.
func TestReportServerVersion(t *testing.T) {
	for _, tc := range []struct {
		gitVersion string
		err        error
		want       string
	}{
		{"v1.29.15", nil, "older than the oldest supported Kubernetes release"},
		{"v1.30.0", nil, `"API server" serverVersion="v1.30.0" supported="1.30–1.37"`},
		{"v1.30.4-gke.1348000", nil, `"API server" serverVersion="v1.30.4-gke.1348000"`},
		{"v1.37.2", nil, `"API server" serverVersion="v1.37.2"`},
		{"v1.38.0", nil, "newer than any Kubernetes release this version was tested against"},
		{"banana", nil, "Cannot parse the API server's version"},
		{"", errors.New("connection refused"), "Cannot read the API server's version"},
	} {
		t.Run(tc.gitVersion, func(t *testing.T) {
			d := fake.NewClientset().Discovery().(*fakediscovery.FakeDiscovery)
			d.FakedServerVersion = &apiversion.Info{GitVersion: tc.gitVersion}
			var sv discovery.ServerVersionInterface = d
			if tc.err != nil {
				sv = failingVersion{tc.err}
			}
			var logged bytes.Buffer
			ctx := klog.NewContext(t.Context(), textlogger.NewLogger(textlogger.NewConfig(textlogger.Output(&logged))))
			reportServerVersion(ctx, sv)
			if !strings.Contains(logged.String(), tc.want) {
				t.Errorf("server %q: logged %q, want %q", tc.gitVersion, logged.String(), tc.want)
			}
		})
	}
}

type failingVersion struct{ err error }

func (f failingVersion) ServerVersion() (*apiversion.Info, error) { return nil, f.err }
