package app

import (
	"path/filepath"
	"strings"
	"testing"
)

// unreachableKubeconfig names a server nobody listens on.
const unreachableKubeconfig = "testdata/unreachable.kubeconfig"

func TestRestConfig(t *testing.T) {
	for _, tc := range []struct {
		name      string
		cc        ClientConfig
		wantErr   bool
		wantQPS   float32
		wantBurst int
	}{
		{name: "client-go defaults", cc: ClientConfig{Kubeconfig: unreachableKubeconfig}},
		{name: "rate limits", cc: ClientConfig{Kubeconfig: unreachableKubeconfig, QPS: 20, Burst: 40}, wantQPS: 20, wantBurst: 40},
		{name: "missing kubeconfig", cc: ClientConfig{Kubeconfig: filepath.Join(t.TempDir(), "missing")}, wantErr: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg, err := restConfig(tc.cc)
			if tc.wantErr {
				if err == nil || !strings.Contains(err.Error(), "no usable client configuration") {
					t.Errorf("error = %v, want no usable client configuration", err)
				}
				return
			}
			if err != nil {
				t.Fatalf("restConfig: %v", err)
			}
			if cfg.Host != "https://127.0.0.1:1" || cfg.QPS != tc.wantQPS || cfg.Burst != tc.wantBurst {
				t.Errorf("host, qps, burst = %q, %v, %d; want https://127.0.0.1:1, %v, %d", cfg.Host, cfg.QPS, cfg.Burst, tc.wantQPS, tc.wantBurst)
			}
		})
	}
}
