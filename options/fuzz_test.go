package options

import (
	"errors"
	"math"
	"strings"
	"testing"
	"time"

	"github.com/spf13/pflag"
	"k8s.io/apimachinery/pkg/util/validation"

	"github.com/leader-elector/leader-elector/internal/textline"
)

// FuzzParseOptions feeds the command line and the environment arbitrary
// values. args are the arguments separated by NUL (which no argument can
// hold); environ is NAME=value lines. Every input is either refused with
// one printable line or gives options inside every supported range.
// `make fuzz` runs it; testdata/fuzz/FuzzParseOptions holds the corpus.
func FuzzParseOptions(f *testing.F) {
	for _, seed := range []struct{ args, environ string }{
		{"--lease-name=my-app", ""},
		{"--lease-name=my-app\x00--lease-duration=1000000h\x00--renew-deadline=999999h\x00--retry-period=1h", ""},
		{"--lease-name=my-app\x00--lease-duration=1s\x00--renew-deadline=3ns\x00--retry-period=2ns", ""},
		{"--lease-name=my-app\x00--partitions=1024\x00--retry-period=1ms", ""},
		{"--lease-name=my-app\x00--identity=pod\nfoo", ""},
		{"--lease-name=my-app\x00--identity=(not admitted by the gate)", ""},
		{"--lease-name=my-app\x00--route=endpointslice\x00--service=app\x00--pod-ip=::ffff:10.0.0.1", ""},
		{"--lease-name=my-app\x00--http-address=localhost:8080\x00--probe-address=127.0.0.1:8080", ""},
		{"--lease-name=my-app\x00--probe-address=:-0", ""},
		{"--lease-name=my-app\x00--kube-api-qps=NaN", ""},
		{"--lease-name=my-app\x00--proxy-address=:8080\x00--proxy-upstream=[::1]:0\x00--proxy-peer-address=localhost:4040", "LEADER_ELECTOR_PROXY_WAIT=-1s"},
		{"", "LEADER_ELECTOR_LEASE_NAME=my-app\nLEADER_ELECTOR_LEASE_DURATON=60s"},
		{"", "LEADER_ELECTOR_LEASE_NAME=my-app\nLEADER_ELECTOR_DEMO_SERVICE_HOST=10.0.0.1\nPOD_NAME=pod-a\nPOD_IP=10.0.0.7"},
		{"--election=my-app\x00--id=pod-a\x00--http=:4041", "LEADER_ELECTOR_ELECTION=other"},
		{"--lease-name=my-app\x00stray\r\x1b[2J", ""},
		{"--help", ""},
		{"--version", "LEADER_ELECTOR_RETRY_PERIOD=often"},
	} {
		f.Add(seed.args, seed.environ)
	}
	// -v sets klog's global verbosity: put it back afterwards.
	f.Cleanup(func() { _, _, _ = parse([]string{"-v=0", "--lease-name=x"}, plainEnv.environment()) })

	f.Fuzz(func(t *testing.T, args, environ string) {
		var argv []string
		if args != "" {
			argv = strings.Split(args, "\x00")
		}
		vars := map[string]string{}
		for _, line := range strings.Split(environ, "\n") {
			if name, value, ok := strings.Cut(line, "="); ok && name != "" {
				vars[name] = value
			}
		}
		o, _, err := parse(argv, fakeEnv{vars: vars, hostname: "host-1"}.environment())
		switch {
		case errors.Is(err, pflag.ErrHelp):
			return
		case err != nil:
			line := textline.OneLine(err)
			if line == "" || !textline.Printable(line) {
				t.Fatalf("refusal is not one printable line: %q", line)
			}
			return
		case o.Version:
			return
		}
		checkSupported(t, o)
	})
}

// checkSupported fails unless every option is inside its supported range.
func checkSupported(t *testing.T, o *Options) {
	t.Helper()
	if o.LeaseDuration < minLeaseDuration || o.LeaseDuration > maxTiming || o.LeaseDuration%time.Second != 0 ||
		o.LeaseDuration.Seconds() > math.MaxInt32 {
		t.Errorf("accepted --lease-duration %v", o.LeaseDuration)
	}
	if o.RenewDeadline < minRenewDeadline || o.LeaseDuration-o.RenewDeadline < max(time.Second, o.LeaseDuration/100) {
		t.Errorf("accepted --renew-deadline %v with --lease-duration %v", o.RenewDeadline, o.LeaseDuration)
	}
	if o.RetryPeriod < minRetryPeriod || float64(o.RenewDeadline) <= 1.2*float64(o.RetryPeriod) {
		t.Errorf("accepted --retry-period %v with --renew-deadline %v", o.RetryPeriod, o.RenewDeadline)
	}
	for name, msgs := range map[string][]string{
		"lease-name":      validation.IsDNS1123Subdomain(o.LeaseName),
		"lease-namespace": validation.IsDNS1123Label(o.LeaseNamespace),
		"identity":        validation.IsDNS1123Subdomain(o.Identity),
	} {
		if len(msgs) > 0 {
			t.Errorf("accepted --%s that is no DNS name: %v", name, msgs)
		}
	}
	for _, addr := range []string{o.HTTPAddress, o.ProbeAddress} {
		if err := validateAddress(addr); err != nil {
			t.Errorf("accepted listen address %q: %v", addr, err)
		}
	}
	if overlapping(o.HTTPAddress, o.ProbeAddress) {
		t.Errorf("accepted overlapping listen addresses %q and %q", o.HTTPAddress, o.ProbeAddress)
	}
	if err := o.routingConfig().Validate(); err != nil {
		t.Errorf("accepted a routing configuration its mode refuses: %v", err)
	}
	qps, burst := o.clientRates()
	if math.IsNaN(float64(qps)) || math.IsInf(float64(qps), 0) || qps < 0 || burst < 0 {
		t.Errorf("client rates %v, %d", qps, burst)
	}
	if o.KubeAPIQPS == 0 && qps > maxDerivedQPS {
		t.Errorf("derived client rate %v above %d", qps, maxDerivedQPS)
	}
	if o.Partitions < 0 || o.Partitions > 1024 {
		t.Errorf("accepted --partitions=%d", o.Partitions)
	}
}
