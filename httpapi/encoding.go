package httpapi

import (
	"bytes"
	"encoding/json"
	"errors"
	"mime"
	"net/http"
	"regexp"
	"sort"
	"strconv"
	"strings"

	"github.com/leader-elector/leader-elector/api"
	"github.com/leader-elector/leader-elector/leadership"
)

// leaderJSON is s as GET /leader answers it.
func leaderJSON(s leadership.State) api.Leader {
	return api.Leader{
		Lease:                api.Lease{Namespace: s.Namespace, Name: s.Name},
		Identity:             s.Identity,
		Holder:               s.Holder,
		IsLeader:             s.IsLeader,
		FencingToken:         s.FencingToken,
		LeaseDurationSeconds: s.LeaseDurationSeconds,
		RenewTime:            api.Time{Time: s.RenewTime},
		LeaderSince:          api.Time{Time: s.LeaderSince},
		ValidUntil:           api.Time{Time: s.ValidUntil},
		HolderAddress:        s.HolderAddress,
		Successor:            s.Successor,
		Revision:             s.Revision,
		LastChange:           changeJSON(s.LastChange),
		Degraded:             s.Degraded != "",
		DegradedReason:       s.Degraded,
	}
}

// LeaderBody is the JSON body of GET /leader at s, without validForMs (a
// remaining time that is stale once the body is stored or sent later): what
// --on-change-url receives (package notify).
func LeaderBody(s leadership.State) ([]byte, error) {
	body, err := marshalJSON(leaderJSON(s))
	if err != nil {
		return nil, err
	}
	return append(body, '\n'), nil
}

// changeJSON is c as the API writes it; nil before the first change.
func changeJSON(c leadership.Change) *api.Change {
	if c.Reason == "" {
		return nil
	}
	return &api.Change{IsLeader: c.Leader, Reason: string(c.Reason), At: api.Time{Time: c.At}, FencingToken: c.FencingToken}
}

func marshalJSON(v any) ([]byte, error) {
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(v); err != nil {
		return nil, err
	}
	return bytes.TrimRight(buf.Bytes(), "\n"), nil
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	body, err := marshalJSON(v)
	if err != nil {
		status = http.StatusInternalServerError
		body = []byte(`{"error":"could not encode the response"}`)
	}
	writeBody(w, status, append(body, '\n'))
}

// Header values set on every JSON answer, shared to save an allocation per
// request (net/http does not modify them).
var (
	jsonContentType = []string{"application/json"}
	noStore         = []string{"no-store"}
)

// writeBody writes an encoded JSON answer.
func writeBody(w http.ResponseWriter, status int, body []byte) {
	h := w.Header()
	h["Content-Type"] = jsonContentType
	h["Cache-Control"] = noStore
	w.WriteHeader(status)
	_, _ = w.Write(body)
}

func writeError(w http.ResponseWriter, status int, msg string) {
	writeJSON(w, status, &api.Error{Message: msg})
}

// writeTermChanged answers a write refused because it named another term
// than the current one: 409, reason term-changed.
func writeTermChanged(w http.ResponseWriter, err error) {
	writeJSON(w, http.StatusConflict, &api.Error{Message: err.Error(), Reason: api.ReasonTermChanged})
}

// qValueSyntax is RFC 9110's qvalue: 0 to 1 with at most three decimals.
// strconv.ParseFloat alone takes NaN, Inf, 2 and -1, and a NaN weight makes
// the order of the offers depend on the order they were listed in.
var qValueSyntax = regexp.MustCompile(`^(0(\.[0-9]{0,3})?|1(\.0{0,3})?)$`)

// qValue returns the weight of a media range, 1 if it has none; false if
// its q parameter is not a qvalue.
func qValue(params map[string]string) (float64, bool) {
	s, ok := params["q"]
	if !ok {
		return 1, true
	}
	if !qValueSyntax.MatchString(s) {
		return 0, false
	}
	q, err := strconv.ParseFloat(s, 64)
	return q, err == nil
}

// wantsPlainText reads the Accept header: text/plain is served only when the
// client prefers it to JSON. No Accept header, */* or application/json get
// JSON; a header that allows neither is refused.
func wantsPlainText(accept []string) (bool, error) {
	if len(accept) == 0 {
		return false, nil
	}
	if len(accept) == 1 && (accept[0] == "*/*" || accept[0] == "application/json") {
		return false, nil // what curl and most clients send
	}
	type offer struct {
		q     float64
		order int
		plain bool
	}
	var offers []offer
	order := 0
	for _, header := range accept {
		for _, part := range strings.Split(header, ",") {
			part = strings.TrimSpace(part)
			if part == "" {
				continue
			}
			mt, params, err := mime.ParseMediaType(part)
			if err != nil {
				continue
			}
			q, ok := qValue(params)
			if !ok {
				continue // as a malformed media range is
			}
			order++
			if q <= 0 {
				continue
			}
			switch mt {
			case "application/json", "application/*", "*/*":
				offers = append(offers, offer{q: q, order: order})
			case "text/plain", "text/*":
				offers = append(offers, offer{q: q, order: order, plain: true})
			}
		}
	}
	if len(offers) == 0 {
		return false, errors.New("this resource is available as application/json or text/plain")
	}
	sort.SliceStable(offers, func(i, j int) bool {
		if offers[i].q != offers[j].q {
			return offers[i].q > offers[j].q
		}
		return offers[i].order < offers[j].order
	})
	return offers[0].plain, nil
}
