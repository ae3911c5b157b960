package httpapi

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math"
	"net/http"
	"regexp"
	"strconv"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"k8s.io/utils/clock"

	"github.com/leader-elector/leader-elector/api"
	"github.com/leader-elector/leader-elector/leadership"
	"github.com/leader-elector/leader-elector/ownership"
)

// Partitions is what the HTTP servers need from a partition group member
// (--partitions).
type Partitions interface {
	// Snapshot returns the current state.
	Snapshot() ownership.State
	// Watch returns the current state and a channel closed at its next
	// change.
	Watch() (ownership.State, <-chan struct{})
	// ReleaseTerm hands one owned partition back, only in the term token
	// (leadership.AnyTerm: the current one); ownership.ErrOutOfRange,
	// ownership.ErrNotOwned or leadership.ErrOtherTerm when it cannot.
	ReleaseTerm(ctx context.Context, i int, token int64) (ownership.State, error)
	// CheckpointTerm stores value with partition i's Lease, fenced by the
	// term token (leadership.AnyTerm: this pod's current term; see
	// partition.Member.CheckpointTerm for its errors).
	CheckpointTerm(ctx context.Context, i int, token int64, value string) (ownership.Checkpoint, error)
	// Ready fails while the pod holds less than its fair share after the
	// group had time to settle.
	Ready() error
	// Candidate fails until the member runs and has reached the API server.
	Candidate() error
	// Healthy fails when one of the member's electors is wedged.
	Healthy() error
}

// partitionsJSON is s as GET /partitions answers it.
func partitionsJSON(s ownership.State) api.Partitions {
	owned := make([]api.OwnedPartition, 0, len(s.Owned))
	for _, o := range s.Owned {
		p := api.OwnedPartition{Partition: o.Partition, FencingToken: o.FencingToken, Since: api.Time{Time: o.Since}, ValidUntil: api.Time{Time: o.ValidUntil}, RenewTime: api.Time{Time: o.RenewTime},
			Draining: o.Draining, DrainDeadline: api.Time{Time: o.DrainDeadline}}
		if o.Checkpoint != nil {
			c := checkpointJSON(*o.Checkpoint)
			p.Checkpoint = &c
		}
		owned = append(owned, p)
	}
	return api.Partitions{
		Lease:                api.Lease{Namespace: s.Namespace, Name: s.Name},
		Identity:             s.Identity,
		Partitions:           s.Partitions,
		LeaseDurationSeconds: int32(s.LeaseDuration / time.Second),
		EffectivePartitions:  s.EffectivePartitions,
		Members:              s.Members,
		Member:               s.Member,
		FairShare:            api.FairShare{Min: s.FairShareMin, Max: s.FairShareMax},
		Owned:                owned,
		Revision:             s.Revision,
		Degraded:             s.Degraded,
		DegradedReason:       s.DegradedReason,
	}
}

// partitionsAnswer is s as an answer writes it (GET /partitions, POST
// /partitions/<i>/release): each owned partition with validForMs measured
// at now, when the answer is written, against its monotonic Deadline.
func partitionsAnswer(s ownership.State, now time.Time) api.Partitions {
	p := partitionsJSON(s)
	for k, o := range s.Owned {
		ms := max(o.Deadline.Sub(now), 0).Milliseconds()
		p.Owned[k].ValidForMs = &ms
	}
	return p
}

// PartitionsBody is the JSON body of GET /partitions at s, with the trailing
// newline: what --on-change-url receives in partition mode (package notify).
func PartitionsBody(s ownership.State) ([]byte, error) {
	body, err := marshalJSON(partitionsJSON(s))
	if err != nil {
		return nil, err
	}
	return append(body, '\n'), nil
}

func checkpointJSON(c ownership.Checkpoint) api.Checkpoint {
	return api.Checkpoint{Value: c.Value, Holder: c.Holder, FencingToken: c.FencingToken, Time: api.Time{Time: c.Time}}
}

// NewPartitionsAPIHandler returns the application API of partition mode:
// GET /partitions (with the long-poll of GET /leader), GET /events (event:
// partitions), POST /partitions/<i>/release and PUT
// /partitions/<i>/checkpoint.
func NewPartitionsAPIHandler(p Partitions, opts APIOptions) http.Handler {
	if opts.KeepAlive <= 0 {
		opts.KeepAlive = defaultKeepAlive
	}
	if opts.Clock == nil {
		opts.Clock = clock.RealClock{}
	}
	a := &partitionsAPI{p: p, keepAlive: opts.KeepAlive, clock: opts.Clock}
	notLeaderMode := func(w http.ResponseWriter, r *http.Request) {
		writeError(w, http.StatusNotFound, r.URL.Path+" is not served in partition mode (--partitions); use GET /partitions")
	}
	return routes{
		"/partitions":  {http.MethodGet: a.partitions},
		"/partitions/": {http.MethodPost: a.partitionAction, http.MethodPut: a.partitionAction},
		"/events":      {http.MethodGet: a.events},
		"/":            {http.MethodGet: notLeaderMode},
		"/leader":      {http.MethodGet: notLeaderMode},
		"/release":     {http.MethodPost: notLeaderMode},
	}
}

type partitionsAPI struct {
	p         Partitions
	keepAlive time.Duration
	// clock is what validForMs is measured on (APIOptions.Clock).
	clock clock.PassiveClock
	// chunks are the SSE events of the last change, shared by the streams.
	chunks eventChunks
}

func (a *partitionsAPI) source() watchable[ownership.State] {
	return watchable[ownership.State]{
		watch:    a.p.Watch,
		revision: func(s ownership.State) uint64 { return s.Revision },
		event:    "partitions",
		encode:   func(s ownership.State) ([]byte, error) { return marshalJSON(partitionsJSON(s)) },
		chunks:   &a.chunks,
	}
}

// partitions answers GET /partitions, optionally as a long-poll.
func (a *partitionsAPI) partitions(w http.ResponseWriter, r *http.Request) {
	q, ok := waitQuery(w, r)
	if !ok {
		return
	}
	state := a.p.Snapshot()
	if q.wait > 0 {
		state = waitFor(w, r, q, a.source())
	}
	writeJSON(w, http.StatusOK, partitionsAnswer(state, a.clock.Now()))
}

func (a *partitionsAPI) events(w http.ResponseWriter, r *http.Request) {
	stream(w, r, a.keepAlive, a.source())
}

// partitionActions are the actions on one partition,
// /partitions/<i>/<action>, and the method of each.
var partitionActions = map[string]string{"release": http.MethodPost, "checkpoint": http.MethodPut}

// partitionAction answers POST /partitions/<i>/release and PUT
// /partitions/<i>/checkpoint.
func (a *partitionsAPI) partitionAction(w http.ResponseWriter, r *http.Request) {
	// The escaped path: "%31" is no spelling of partition 1.
	rest := strings.TrimPrefix(r.URL.EscapedPath(), "/partitions/")
	num, action, _ := strings.Cut(rest, "/")
	method, ok := partitionActions[action]
	if !ok {
		writeError(w, http.StatusNotFound, "no such path: "+r.URL.Path+" (want POST /partitions/<i>/release or PUT /partitions/<i>/checkpoint)")
		return
	}
	if r.Method != method {
		w.Header().Set("Allow", method)
		writeError(w, http.StatusMethodNotAllowed, "method "+r.Method+" not allowed on "+r.URL.Path+"; allowed: "+method)
		return
	}
	token, err := parseTerm(r.URL.Query(), method+" /partitions/<i>/"+action)
	if err != nil {
		writeError(w, http.StatusBadRequest, err.Error())
		return
	}
	i, ok := parsePartitionNumber(num)
	if !ok {
		writeError(w, http.StatusNotFound, fmt.Sprintf("no such partition %q: want a number in canonical decimal (0, 1, 2, …)", num))
		return
	}
	if action == "checkpoint" {
		a.checkpoint(w, r, i, token)
		return
	}
	a.release(w, r, i, token)
}

// release answers POST /partitions/<i>/release[?fencingToken=].
func (a *partitionsAPI) release(w http.ResponseWriter, r *http.Request, i int, token int64) {
	// Bounded as POST /release is (see releaseAnswerTimeout).
	ctx, cancel := context.WithTimeout(r.Context(), releaseAnswerTimeout)
	defer cancel()
	state, err := a.p.ReleaseTerm(ctx, i, token)
	switch {
	case errors.Is(err, ownership.ErrOutOfRange):
		writeError(w, http.StatusNotFound, err.Error())
	case errors.Is(err, ownership.ErrNotOwned):
		writeError(w, http.StatusConflict, err.Error())
	case errors.Is(err, leadership.ErrOtherTerm):
		writeTermChanged(w, err)
	case errors.Is(err, context.DeadlineExceeded):
		writeError(w, http.StatusGatewayTimeout, fmt.Sprintf("stopped owning partition %d, but clearing its Lease did not finish within %v (it goes on, or the Lease expires on its own)", i, releaseAnswerTimeout))
	case err != nil:
		// The claim has been given up locally; only clearing the Lease
		// failed, so another member takes it when it expires.
		writeError(w, http.StatusBadGateway, fmt.Sprintf("stopped owning partition %d, but could not clear its Lease (it expires on its own): %v", i, err))
	default:
		writeJSON(w, http.StatusOK, partitionsAnswer(state, a.clock.Now()))
	}
}

// checkpoint answers PUT /partitions/<i>/checkpoint[?fencingToken=]: the
// body is the checkpoint's value.
func (a *partitionsAPI) checkpoint(w http.ResponseWriter, r *http.Request, i int, token int64) {
	if r.ContentLength > ownership.MaxCheckpointBytes {
		writeError(w, http.StatusRequestEntityTooLarge, fmt.Sprintf("%v, got %d", ownership.ErrCheckpointTooLarge, r.ContentLength))
		return
	}
	// One byte more than allowed tells a body that is too long.
	body, err := io.ReadAll(io.LimitReader(r.Body, ownership.MaxCheckpointBytes+1))
	if err != nil {
		writeError(w, http.StatusBadRequest, "could not read the body: "+err.Error())
		return
	}
	if len(body) > ownership.MaxCheckpointBytes {
		writeError(w, http.StatusRequestEntityTooLarge, fmt.Sprintf("%v, got more", ownership.ErrCheckpointTooLarge))
		return
	}
	// Bounded as a release is: the write's own context ends at the
	// claim's validUntil.
	ctx, cancel := context.WithTimeout(r.Context(), releaseAnswerTimeout)
	defer cancel()
	c, err := a.p.CheckpointTerm(ctx, i, token, string(body))
	var limited *ownership.RateLimitedError
	switch {
	case err == nil:
		writeJSON(w, http.StatusOK, api.CheckpointStored{Partition: i, Checkpoint: checkpointJSON(c)})
	case errors.Is(err, ownership.ErrOutOfRange):
		writeError(w, http.StatusNotFound, err.Error())
	case errors.Is(err, ownership.ErrCheckpointTooLarge):
		writeError(w, http.StatusRequestEntityTooLarge, err.Error())
	case errors.Is(err, ownership.ErrCheckpointNotText):
		writeError(w, http.StatusBadRequest, err.Error())
	case errors.As(err, &limited):
		w.Header().Set("Retry-After", strconv.Itoa(max(1, int(math.Ceil(limited.RetryAfter.Seconds())))))
		writeError(w, http.StatusTooManyRequests, err.Error())
	case errors.Is(err, ownership.ErrNotOwned):
		writeJSON(w, http.StatusConflict, &api.Error{Message: err.Error(), Reason: api.ReasonNotOwned})
	case errors.Is(err, ownership.ErrCheckpointRefused):
		writeJSON(w, http.StatusConflict, &api.Error{Message: err.Error(), Reason: refusalReason(err)})
	case errors.Is(err, context.DeadlineExceeded):
		writeError(w, http.StatusGatewayTimeout, fmt.Sprintf("partition %d: the API server did not answer the checkpoint's write in time; it may or may not be stored: %v", i, err))
	default:
		writeError(w, http.StatusBadGateway, fmt.Sprintf("partition %d: could not store the checkpoint: %v", i, err))
	}
}

// refusalReason names why the term refused a checkpoint.
func refusalReason(err error) string {
	switch {
	case errors.Is(err, leadership.ErrClaimExpired):
		return api.ReasonClaimExpired
	case errors.Is(err, leadership.ErrTermChanged):
		return api.ReasonTermChanged
	default:
		return api.ReasonConflict
	}
}

// canonicalNumber is a non-negative number in canonical decimal:
// strconv.Atoi alone takes "+2", "-0" and "0002".
var canonicalNumber = regexp.MustCompile(`^(0|[1-9][0-9]*)$`)

// parsePartitionNumber reads a partition number; false if it is not one.
func parsePartitionNumber(s string) (int, bool) {
	if !canonicalNumber.MatchString(s) {
		return 0, false
	}
	i, err := strconv.Atoi(s)
	return i, err == nil
}

// NewPartitionsProbeHandler returns the probe server of partition mode:
// /readyz per mode (ReadyWhenLeader: holds its fair share or the group is
// settling; ReadyWhenCandidate: running and reached the API server),
// /healthz, and /metrics from gatherer.
func NewPartitionsProbeHandler(p Partitions, mode Readiness, gatherer prometheus.Gatherer) http.Handler {
	ready := p.Ready
	if mode == ReadyWhenCandidate {
		ready = p.Candidate
	}
	return newProbeRoutes(ready, p.Healthy, gatherer)
}
