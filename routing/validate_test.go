package routing

import (
	"strings"
	"testing"
)

// TestValidateModes: the modes table is the one place a mode is known:
// Validate names every mode of it when one is unknown, and each mode asks
// for what it needs.
func TestValidateModes(t *testing.T) {
	for _, tc := range []struct {
		cfg     Config
		wantErr []string // substrings; none: valid
	}{
		{cfg: Config{}},
		{cfg: Config{Mode: ModeNone}},
		{cfg: Config{Mode: "dns"}, wantErr: []string{`--route "dns" is unknown (want "endpointslice", "label", "none")`}},
		{cfg: Config{Mode: ModeEndpointSlice}, wantErr: []string{"needs --service", "needs --pod-ip"}},
		{cfg: Config{Mode: ModeEndpointSlice, Service: "app", PodIP: "127.0.0.1"}, wantErr: []string{"loopback"}},
		{cfg: Config{Mode: ModeEndpointSlice, Service: "app", PodIP: "10.0.0.7"}},
		{cfg: Config{Mode: ModeLabel, LeaderLabel: DefaultLeaderLabel, LeaseName: "my-app"}},
		{cfg: Config{Mode: ModeLabel, LeaderLabel: GroupLabel, LeaseName: strings.Repeat("a", 64)}, wantErr: []string{"must not be " + GroupLabel, "not a valid label value"}},
	} {
		err := tc.cfg.Validate()
		if len(tc.wantErr) == 0 {
			if err != nil {
				t.Errorf("%+v: %v, want valid", tc.cfg, err)
			}
			continue
		}
		for _, want := range tc.wantErr {
			if err == nil || !strings.Contains(err.Error(), want) {
				t.Errorf("%+v: error %v, want it to say %q", tc.cfg, err, want)
			}
		}
	}
	for _, m := range []Mode{ModeNone, ModeEndpointSlice, ModeLabel} {
		if _, ok := modes[m]; !ok {
			t.Errorf("mode %q is not in the modes table", m)
		}
	}
}
