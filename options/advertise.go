package options

import (
	"errors"
	"fmt"
	"github.com/leader-elector/leader-elector/holderaddress"
	"net"
	"strconv"

	"github.com/spf13/pflag"
)

// advertiseOptions is the address the leader publishes on the Lease for
// followers to forward requests to (--advertise-address, --advertise-port).
type advertiseOptions struct {
	// Host is --advertise-address; $POD_IP when the port is set and it is
	// not.
	Host string
	// Port is --advertise-port; 0 publishes nothing.
	Port int
	// hostGiven: the host came from the flag or its variable, not from
	// $POD_IP.
	hostGiven bool
	// inPod: the sidecar runs in a pod; loopback addresses are refused.
	inPod bool
}

// addFlags registers the flags on fs.
func (a *advertiseOptions) addFlags(fs *pflag.FlagSet) {
	fs.StringVar(&a.Host, "advertise-address", a.Host, "With --advertise-port: the host (an IP address or a DNS name) the leader publishes on the Lease with its fencing token, for followers to forward requests to; every pod's /leader shows it as holderAddress (default $POD_IP).")
	fs.IntVar(&a.Port, "advertise-port", a.Port, "The port the leader publishes with --advertise-address (1..65535; 0, the default, publishes no address).")
}

// complete takes the host from the downward API's $POD_IP if the port is
// set and the host is not.
func (a *advertiseOptions) complete(env Environment) {
	// The kubelet sets $KUBERNETES_SERVICE_HOST in every container of a
	// pod, with or without service links; a sidecar run by hand or by the
	// tests has none, and may then advertise and show loopback addresses.
	v, _ := env.lookupEnv("KUBERNETES_SERVICE_HOST")
	a.inPod = v != ""
	a.hostGiven = a.Host != ""
	if a.Host == "" && a.Port != 0 {
		a.Host, _ = env.lookupEnv("POD_IP")
	}
}

// address is the host:port published, "" for none.
func (a *advertiseOptions) address() string {
	if a.Port == 0 || a.Host == "" {
		return ""
	}
	return net.JoinHostPort(a.Host, strconv.Itoa(a.Port))
}

// validate checks the pair; partitions is --partitions, whose Leases have
// many holders and no one leader to forward to.
func (a *advertiseOptions) validate(partitions int) []error {
	var errs []error
	switch {
	case a.Port < 0 || a.Port > 65535:
		errs = append(errs, fmt.Errorf("--advertise-port must be within 1..65535 (0: no address), got %d", a.Port))
	case a.Port == 0 && a.hostGiven:
		errs = append(errs, fmt.Errorf("--advertise-address %s needs --advertise-port (the port followers forward to)", quoteShort(a.Host)))
	case a.Port != 0 && a.Host == "":
		errs = append(errs, errors.New("--advertise-port needs --advertise-address or $POD_IP (the downward API's status.podIP)"))
	case a.Port != 0:
		if err := holderaddress.Check(a.address(), !a.inPod); err != nil {
			errs = append(errs, fmt.Errorf("--advertise-address %s: %w", quoteShort(a.Host), err))
		}
	}
	if partitions > 0 && (a.Port != 0 || a.hostGiven) {
		errs = append(errs, errors.New("--advertise-address and --advertise-port publish one leader's address; they cannot be combined with --partitions"))
	}
	return errs
}
