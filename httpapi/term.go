package httpapi

import (
	"fmt"
	"math"
	"net/url"
	"strconv"
	"strings"

	"github.com/leader-elector/leader-elector/leadership"
)

// termParam names the term a write belongs to: the fencing token the app
// was given when its work began. A checkpoint, a release or a partition's
// release that carries it is done only in that term, so a worker left over
// from an earlier term of the same pod cannot store its checkpoint under
// the current term's token, or end the current term (answered 409,
// reason term-changed). On POST /acquire it names the term the app knew:
// the pod campaigns only once that term is over.
const termParam = "fencingToken"

// parseTerm reads ?fencingToken= and refuses every other parameter;
// leadership.AnyTerm without one. A token is a Lease's leaseTransitions, an
// int32: anything but a canonical decimal number from 0 to 2147483647 is
// refused, so that "+5", "05" or "5.0" cannot name the term 5.
func parseTerm(v url.Values, what string) (int64, error) {
	for key := range v {
		if key != termParam {
			return 0, fmt.Errorf("unknown query parameter %q of %s (known: %s)", key, what, termParam)
		}
	}
	if !v.Has(termParam) {
		return leadership.AnyTerm, nil
	}
	if len(v[termParam]) > 1 {
		return 0, fmt.Errorf("query parameter %q given more than once", termParam)
	}
	return parseToken(v.Get(termParam))
}

// parseToken reads a fencing token in canonical decimal within int32.
func parseToken(s string) (int64, error) {
	n, err := strconv.ParseInt(s, 10, 64)
	if !canonicalNumber.MatchString(s) || err != nil || n > math.MaxInt32 {
		return 0, fmt.Errorf("invalid %s %q: want the term's fencing token, a whole number from 0 to %d in canonical decimal", termParam, clip(s), math.MaxInt32)
	}
	return n, nil
}

// clip shortens what a client sent for an error message.
func clip(s string) string {
	const max = 32
	if len(s) <= max {
		return s
	}
	return strings.ToValidUTF8(s[:max], "") + "…"
}
