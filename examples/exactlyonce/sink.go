package exactlyonce

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"sync"
)

// Sink is where the worker's results go: a store whose every write is
// conditional on the partition's fencing token and offset, checked and
// applied atomically by the store itself. This is what a real sink must
// provide: a conditional write (a compare-and-set on a row that holds the
// token and the offset), a transaction that stores the results together
// with the offset and checks the token, or an API that takes the token and
// refuses a lower one. A lock taken by the writer (a file lock, say) is not
// enough: a writer frozen inside its critical section would hold it, and
// one resumed there would write after the next owner.
type Sink interface {
	// Fence raises the partition's token to token, so that the previous
	// owner's writes are refused from now on (Kafka's producer epochs work
	// the same way), and returns the sink's state for the partition: its
	// Offset is the last item the sink has. ErrStaleToken if the sink has
	// seen a higher token.
	Fence(ctx context.Context, partition int, token int64) (SinkState, error)
	// Apply stores result as the item at offset under token. applied is
	// false, without an error, for an offset the sink already has (an item
	// re-applied after resuming from an older checkpoint); ErrStaleToken
	// when the sink has seen a higher token, ErrGap when offset skips one.
	Apply(ctx context.Context, partition int, token, offset int64, result string) (applied bool, err error)
}

// ErrStaleToken: the sink has seen a higher fencing token for the
// partition; the writer is no longer its owner and must stop.
var ErrStaleToken = errors.New("refused: the sink has seen a higher fencing token")

// ErrGap: the item's offset is beyond the next one the sink expects: a
// worker that resumed past an item the sink never received (a bug).
var ErrGap = errors.New("refused: an item before this one was never applied")

// SinkState is what the sink holds for one partition.
type SinkState struct {
	// Token is the highest fencing token the sink has seen.
	Token int64 `json:"token"`
	// Offset is the offset of the last applied item, 0 for none.
	Offset int64 `json:"offset"`
	// Refused counts the writes refused for a stale token.
	Refused int64 `json:"refused"`
}

// Result is one applied item.
type Result struct {
	Offset int64
	Token  int64
	Value  string
}

// MemorySink is a Sink in memory, served over HTTP by Handler to the
// workers of other processes (SinkClient). Every operation holds one mutex
// of the serving process, which no worker's freeze or crash can hold.
type MemorySink struct {
	mu    sync.Mutex
	parts map[int]*memoryPartition
}

type memoryPartition struct {
	state   SinkState
	results []Result
}

// NewMemorySink returns an empty sink.
func NewMemorySink() *MemorySink { return &MemorySink{parts: map[int]*memoryPartition{}} }

func (s *MemorySink) part(partition int) *memoryPartition {
	p := s.parts[partition]
	if p == nil {
		p = &memoryPartition{}
		s.parts[partition] = p
	}
	return p
}

// Fence implements Sink.
func (s *MemorySink) Fence(_ context.Context, partition int, token int64) (SinkState, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	p := s.part(partition)
	if token < p.state.Token {
		p.state.Refused++
		return p.state, ErrStaleToken
	}
	p.state.Token = token
	return p.state, nil
}

// Apply implements Sink: the token, the offset and the result are checked
// and stored together.
func (s *MemorySink) Apply(_ context.Context, partition int, token, offset int64, result string) (bool, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	p := s.part(partition)
	switch {
	case token < p.state.Token:
		p.state.Refused++
		return false, ErrStaleToken
	case offset <= p.state.Offset:
		return false, nil
	case offset > p.state.Offset+1:
		return false, fmt.Errorf("%w: offset %d, the sink has %d", ErrGap, offset, p.state.Offset)
	}
	p.state.Token, p.state.Offset = token, offset
	p.results = append(p.results, Result{Offset: offset, Token: token, Value: result})
	return true, nil
}

// State is the partition's state.
func (s *MemorySink) State(partition int) SinkState {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.part(partition).state
}

// Results are the partition's results, in the order they were applied.
func (s *MemorySink) Results(partition int) []Result {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]Result(nil), s.part(partition).results...)
}

// Handler serves the sink: POST /fence and POST /apply, with the
// partition, token and offset in the query and the result as the body.
// 409 with {"error": "stale-token"} or {"error": "gap"} for the refusals.
func (s *MemorySink) Handler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("POST /fence", func(w http.ResponseWriter, r *http.Request) {
		q, err := ints(r.URL.Query(), "partition", "token")
		if err != nil {
			sinkError(w, http.StatusBadRequest, err.Error())
			return
		}
		st, err := s.Fence(r.Context(), int(q[0]), q[1])
		if errors.Is(err, ErrStaleToken) {
			sinkError(w, http.StatusConflict, "stale-token")
			return
		}
		_ = json.NewEncoder(w).Encode(st)
	})
	mux.HandleFunc("POST /apply", func(w http.ResponseWriter, r *http.Request) {
		q, err := ints(r.URL.Query(), "partition", "token", "offset")
		if err != nil {
			sinkError(w, http.StatusBadRequest, err.Error())
			return
		}
		body, err := io.ReadAll(io.LimitReader(r.Body, 1<<20))
		if err != nil {
			sinkError(w, http.StatusBadRequest, err.Error())
			return
		}
		applied, err := s.Apply(r.Context(), int(q[0]), q[1], q[2], string(body))
		switch {
		case errors.Is(err, ErrStaleToken):
			sinkError(w, http.StatusConflict, "stale-token")
		case errors.Is(err, ErrGap):
			sinkError(w, http.StatusConflict, "gap")
		default:
			_ = json.NewEncoder(w).Encode(map[string]bool{"applied": applied})
		}
	})
	return mux
}

func ints(q url.Values, names ...string) ([]int64, error) {
	out := make([]int64, len(names))
	for i, n := range names {
		v, err := strconv.ParseInt(q.Get(n), 10, 64)
		if err != nil || v < 0 {
			return nil, fmt.Errorf("%s=%q is not a whole number ≥ 0", n, q.Get(n))
		}
		out[i] = v
	}
	return out, nil
}

func sinkError(w http.ResponseWriter, code int, msg string) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	_ = json.NewEncoder(w).Encode(map[string]string{"error": msg})
}

// SinkClient is a Sink served by MemorySink.Handler at BaseURL.
type SinkClient struct {
	BaseURL string
	HTTP    *http.Client
}

// Fence implements Sink.
func (c SinkClient) Fence(ctx context.Context, partition int, token int64) (SinkState, error) {
	var st SinkState
	err := c.post(ctx, "/fence", url.Values{"partition": {strconv.Itoa(partition)}, "token": {strconv.FormatInt(token, 10)}}, "", &st)
	return st, err
}

// Apply implements Sink.
func (c SinkClient) Apply(ctx context.Context, partition int, token, offset int64, result string) (bool, error) {
	var a struct {
		Applied bool `json:"applied"`
	}
	q := url.Values{"partition": {strconv.Itoa(partition)}, "token": {strconv.FormatInt(token, 10)}, "offset": {strconv.FormatInt(offset, 10)}}
	err := c.post(ctx, "/apply", q, result, &a)
	return a.Applied, err
}

func (c SinkClient) post(ctx context.Context, path string, q url.Values, body string, out any) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, c.BaseURL+path+"?"+q.Encode(), strings.NewReader(body))
	if err != nil {
		return err
	}
	resp, err := c.HTTP.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode == http.StatusConflict {
		var e struct {
			Error string `json:"error"`
		}
		_ = json.NewDecoder(resp.Body).Decode(&e)
		if e.Error == "gap" {
			return ErrGap
		}
		return ErrStaleToken
	}
	if resp.StatusCode != http.StatusOK {
		b, _ := io.ReadAll(io.LimitReader(resp.Body, 4096))
		return fmt.Errorf("sink %s: %s: %s", path, resp.Status, strings.TrimSpace(string(b)))
	}
	return json.NewDecoder(resp.Body).Decode(out)
}
