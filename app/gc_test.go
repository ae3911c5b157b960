package app

import "testing"

func TestSetGCPercent(t *testing.T) {
	for _, tc := range []struct {
		name string
		env  map[string]string
		want int // -2: not set
	}{
		{name: "default", env: map[string]string{}, want: sidecarGCPercent},
		{name: "GOGC wins", env: map[string]string{"GOGC": "200"}, want: -2},
		{name: "GOGC=off wins", env: map[string]string{"GOGC": "off"}, want: -2},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := -2
			SetGCPercent(func(k string) (string, bool) { v, ok := tc.env[k]; return v, ok }, func(p int) int { got = p; return 100 })
			if got != tc.want {
				t.Errorf("set %d, want %d", got, tc.want)
			}
		})
	}
}
