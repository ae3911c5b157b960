package main

import (
	"flag"
	"strings"
	"testing"
	"time"
)

// Every value outside its range is refused with one line that names it.
func TestValidateRefusesBadInput(t *testing.T) {
	ok := func() (string, string, string, int, time.Duration, time.Duration) {
		return "http://127.0.0.1:4040", "/streams", "http://sink:8080", 10, 20 * time.Millisecond, 0
	}
	sidecar, source, sink, every, poll, delay := ok()
	if err := validate(flag.NewFlagSet("t", flag.ContinueOnError), sidecar, source, sink, every, poll, delay); err != nil {
		t.Fatalf("good values refused: %v", err)
	}
	for _, tc := range []struct {
		name   string
		change func(*string, *string, *string, *int, *time.Duration, *time.Duration)
		want   string
	}{
		{"sink not a URL", func(_, _, k *string, _ *int, _, _ *time.Duration) { *k = "sink:8080" }, "--sink="},
		{"no source", func(_, s, _ *string, _ *int, _, _ *time.Duration) { *s = "" }, "--source is required"},
		{"checkpoint-every 0", func(_, _, _ *string, e *int, _, _ *time.Duration) { *e = 0 }, "--checkpoint-every=0"},
		{"poll too short", func(_, _, _ *string, _ *int, p, _ *time.Duration) { *p = time.Microsecond }, "--poll=1µs"},
		{"item-delay negative", func(_, _, _ *string, _ *int, _, d *time.Duration) { *d = -time.Millisecond }, "--item-delay=-1ms"},
		{"item-delay above 1s", func(_, _, _ *string, _ *int, _, d *time.Duration) { *d = 2 * time.Second }, "--item-delay=2s"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			sidecar, source, sink, every, poll, delay := ok()
			tc.change(&sidecar, &source, &sink, &every, &poll, &delay)
			err := validate(flag.NewFlagSet("t", flag.ContinueOnError), sidecar, source, sink, every, poll, delay)
			if err == nil || !strings.Contains(err.Error(), tc.want) || strings.Contains(err.Error(), "\n") {
				t.Errorf("got %v, want one line containing %q", err, tc.want)
			}
		})
	}
}

// --supervised needs the partition and the token the supervisor gives its
// child.
func TestSupervisedTerm(t *testing.T) {
	for _, tc := range []struct {
		partition, token string
		wantErr          string
	}{
		{"3", "17", ""},
		{"", "17", "LEADER_ELECTOR_PARTITION"},
		{"-1", "17", "LEADER_ELECTOR_PARTITION"},
		{"3", "", "LEADER_ELECTOR_FENCING_TOKEN"},
		{"3", "x", "LEADER_ELECTOR_FENCING_TOKEN"},
	} {
		t.Setenv("LEADER_ELECTOR_PARTITION", tc.partition)
		t.Setenv("LEADER_ELECTOR_FENCING_TOKEN", tc.token)
		p, token, err := supervisedTerm()
		switch {
		case tc.wantErr == "" && (err != nil || p != 3 || token != 17):
			t.Errorf("%q %q: %d %d %v, want 3 17", tc.partition, tc.token, p, token, err)
		case tc.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tc.wantErr)):
			t.Errorf("%q %q: %v, want an error naming %s", tc.partition, tc.token, err, tc.wantErr)
		}
	}
}
