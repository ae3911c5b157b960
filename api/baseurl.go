package api

import (
	"errors"
	"fmt"
	"net"
	"net/url"
)

// DefaultBaseURL is where the sidecar's application API listens unless
// --http-address says otherwise.
const DefaultBaseURL = "http://127.0.0.1:4040"

// The environment that tells a program in the pod where the API is.
const (
	// EnvURL is the API's URL as the application containers are given it
	// (the chart's leader-elector.appEnv).
	EnvURL = "LEADER_ELECTOR_URL"
	// EnvHTTPAddress is the sidecar's own --http-address taken from its
	// environment: inside the sidecar's container it says where the API
	// listens.
	EnvHTTPAddress = "LEADER_ELECTOR_HTTP_ADDRESS"
)

// BaseURLFromEnv is the API's base URL as the environment gives it, for a
// command that runs in the pod (leader-elector status, leader-elector
// run): $LEADER_ELECTOR_URL, else http:// + $LEADER_ELECTOR_HTTP_ADDRESS (a
// wildcard host is reached on loopback), else DefaultBaseURL. lookup is
// os.LookupEnv, or a test's; an empty variable counts as unset. The error
// names the variable and its value.
func BaseURLFromEnv(lookup func(string) (string, bool)) (string, error) {
	if v, ok := lookup(EnvURL); ok && v != "" {
		u, err := ParseBaseURL(v)
		if err != nil {
			return "", fmt.Errorf("$%s %q: %w", EnvURL, v, err)
		}
		return u, nil
	}
	if v, ok := lookup(EnvHTTPAddress); ok && v != "" {
		u, err := addressURL(v)
		if err != nil {
			return "", fmt.Errorf("$%s %q: %w", EnvHTTPAddress, v, err)
		}
		return u, nil
	}
	return DefaultBaseURL, nil
}

// ParseBaseURL checks that raw is the API's address, http(s)://host:port
// with no path or query (a trailing slash is allowed), and returns
// it as scheme://host.
func ParseBaseURL(raw string) (string, error) {
	u, err := url.Parse(raw)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" || (u.Path != "" && u.Path != "/") || u.RawQuery != "" {
		return "", errors.New("want http://host:port (the API's address, no path)")
	}
	// url.URL's String escapes what Host holds unescaped (an IPv6 zone's
	// "%"), so that the result parses again.
	return (&url.URL{Scheme: u.Scheme, Host: u.Host}).String(), nil
}

// addressURL turns a listen address into the URL that reaches it from the
// same pod: a wildcard host is reached on loopback.
func addressURL(addr string) (string, error) {
	host, port, err := net.SplitHostPort(addr)
	if err != nil || port == "" || port == "0" {
		return "", errors.New("not host:port with a fixed port")
	}
	switch host {
	case "", "0.0.0.0":
		host = "127.0.0.1"
	case "::":
		host = "::1"
	}
	return (&url.URL{Scheme: "http", Host: net.JoinHostPort(host, port)}).String(), nil
}
