package api

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"
)

// Client asks one sidecar's application API.
type Client struct {
	baseURL string
	http    *http.Client
}

// NewClient returns a client of the API at baseURL (for example
// "http://127.0.0.1:4040"). httpClient is used for every request,
// http.DefaultClient if nil; its Timeout also bounds the long-polls, so give
// WaitLeader and WaitPartitions a wait shorter than it.
func NewClient(baseURL string, httpClient *http.Client) *Client {
	if httpClient == nil {
		httpClient = http.DefaultClient
	}
	return &Client{baseURL: baseURL, http: httpClient}
}

// BaseURL is the API's address as given to NewClient.
func (c *Client) BaseURL() string { return c.baseURL }

// Leader asks GET /leader.
func (c *Client) Leader(ctx context.Context) (Leader, error) {
	var l Leader
	return l, c.do(ctx, http.MethodGet, "/leader", nil, &l)
}

// WaitLeader long-polls GET /leader: it answers once the state's revision
// differs from revision, or after wait with the state unchanged. A wait
// above 5 minutes is refused (an *Error with StatusCode 400), not
// shortened. Pass the Revision of the last answer to learn of the next
// change without missing one.
func (c *Client) WaitLeader(ctx context.Context, revision uint64, wait time.Duration) (Leader, error) {
	var l Leader
	return l, c.do(ctx, http.MethodGet, "/leader", waitQuery(revision, wait), &l)
}

// IsLeader asks GET /leader whether this pod leads now: the checkAlive of
// a Lease API. The sidecar answers from its own state, without a request
// to the API server.
func (c *Client) IsLeader(ctx context.Context) (bool, error) {
	l, err := c.Leader(ctx)
	return l.IsLeader, err
}

// Release asks POST /release: the leader steps down (Released true); on a
// pod that does not lead it does nothing (Released false).
func (c *Client) Release(ctx context.Context) (Release, error) {
	var r Release
	return r, c.do(ctx, http.MethodPost, "/release", nil, &r)
}

// ReleaseTerm asks POST /release?fencingToken=: the leader steps down only
// if it leads in the term fencingToken (the token the app's work began
// under). A release left over from an earlier term is answered an *Error
// with StatusCode 409 and Reason ReasonTermChanged, and the current term
// goes on; on a pod that does not lead it does nothing (Released false).
func (c *Client) ReleaseTerm(ctx context.Context, fencingToken int64) (Release, error) {
	var r Release
	return r, c.do(ctx, http.MethodPost, "/release", termQuery(fencingToken), &r)
}

// Acquire asks POST /acquire: try to take the Lease, with the sidecar's
// --acquire-retries attempts --acquire-retry-delay apart. Acquired is false
// when another pod holds it; that is no error. An observer
// (--candidate=false) answers an *Error with StatusCode 409.
func (c *Client) Acquire(ctx context.Context) (Acquire, error) {
	var a Acquire
	return a, c.do(ctx, http.MethodPost, "/acquire", nil, &a)
}

// TryAcquire is Acquire with the attempts and their spacing given.
func (c *Client) TryAcquire(ctx context.Context, attempts int, retryDelay time.Duration) (Acquire, error) {
	var a Acquire
	q := url.Values{"retries": {strconv.Itoa(attempts)}, "retryDelay": {retryDelay.String()}}
	return a, c.do(ctx, http.MethodPost, "/acquire", q, &a)
}

// WaitAcquire asks POST /acquire?wait=: campaign until this pod leads or
// wait (at most 5 minutes) has passed. Give the http.Client a Timeout
// above wait.
func (c *Client) WaitAcquire(ctx context.Context, wait time.Duration) (Acquire, error) {
	var a Acquire
	return a, c.do(ctx, http.MethodPost, "/acquire", url.Values{"wait": {wait.String()}}, &a)
}

// AcquireAfterTerm asks POST /acquire?fencingToken=: campaign only if the
// term fencingToken (the last one the app knew) has ended, so that an
// acquisition always begins a later term. An *Error with StatusCode 409
// and Reason ReasonTermCurrent, and no attempt, while that term is still
// the Lease's current one (held by this pod or another) or one the
// sidecar has not seen. A wait above 0 campaigns as WaitAcquire does;
// otherwise with the sidecar's --acquire-retries.
func (c *Client) AcquireAfterTerm(ctx context.Context, fencingToken int64, wait time.Duration) (Acquire, error) {
	var a Acquire
	q := termQuery(fencingToken)
	if wait > 0 {
		q.Set("wait", wait.String())
	}
	return a, c.do(ctx, http.MethodPost, "/acquire", q, &a)
}

// Partitions asks GET /partitions (partition mode).
func (c *Client) Partitions(ctx context.Context) (Partitions, error) {
	var p Partitions
	return p, c.do(ctx, http.MethodGet, "/partitions", nil, &p)
}

// WaitPartitions long-polls GET /partitions as WaitLeader does GET /leader.
func (c *Client) WaitPartitions(ctx context.Context, revision uint64, wait time.Duration) (Partitions, error) {
	var p Partitions
	return p, c.do(ctx, http.MethodGet, "/partitions", waitQuery(revision, wait), &p)
}

// ReleasePartition asks POST /partitions/<i>/release: this pod hands
// partition i back. An *Error with StatusCode 409 if it does not own it,
// 404 if there is no such partition.
func (c *Client) ReleasePartition(ctx context.Context, i int) (Partitions, error) {
	var p Partitions
	return p, c.do(ctx, http.MethodPost, "/partitions/"+strconv.Itoa(i)+"/release", nil, &p)
}

// Checkpoint asks PUT /partitions/<i>/checkpoint: store value (UTF-8 text,
// at most MaxCheckpointBytes) with partition i's Lease, fenced by this pod's
// term. An *Error with StatusCode 409 and a Reason when the term refuses it
// (ReasonNotOwned, ReasonClaimExpired, ReasonTermChanged, ReasonConflict):
// stop working on i. 429 with RetryAfter when the partition's checkpoints
// come too fast, 413 when value is too long, 404 if there is no such
// partition.
func (c *Client) Checkpoint(ctx context.Context, i int, value string) (CheckpointStored, error) {
	var s CheckpointStored
	return s, c.send(ctx, http.MethodPut, "/partitions/"+strconv.Itoa(i)+"/checkpoint", nil, strings.NewReader(value), &s)
}

// CheckpointTerm is Checkpoint in the term fencingToken: the
// OwnedPartition.FencingToken the worker started on partition i under.
// Use it rather than Checkpoint: a worker left over from an earlier term
// of this pod is then refused (409, ReasonTermChanged) instead of
// storing its older checkpoint under the current term's token.
func (c *Client) CheckpointTerm(ctx context.Context, i int, fencingToken int64, value string) (CheckpointStored, error) {
	var s CheckpointStored
	return s, c.send(ctx, http.MethodPut, "/partitions/"+strconv.Itoa(i)+"/checkpoint", termQuery(fencingToken), strings.NewReader(value), &s)
}

// ReleasePartitionTerm is ReleasePartition in the term fencingToken only:
// a release left over from an earlier term is answered 409 with
// ReasonTermChanged, and the current term goes on.
func (c *Client) ReleasePartitionTerm(ctx context.Context, i int, fencingToken int64) (Partitions, error) {
	var p Partitions
	return p, c.do(ctx, http.MethodPost, "/partitions/"+strconv.Itoa(i)+"/release", termQuery(fencingToken), &p)
}

// termQuery is ?fencingToken=.
func termQuery(fencingToken int64) url.Values {
	return url.Values{"fencingToken": {strconv.FormatInt(fencingToken, 10)}}
}

func waitQuery(revision uint64, wait time.Duration) url.Values {
	return url.Values{
		"revision": {strconv.FormatUint(revision, 10)},
		"wait":     {wait.String()},
	}
}

// maxErrorBody bounds how much of an error answer is read.
const maxErrorBody = 64 << 10

// do sends one request and decodes a 2xx answer into out; any other answer
// becomes an *Error.
func (c *Client) do(ctx context.Context, method, path string, query url.Values, out any) error {
	return c.send(ctx, method, path, query, nil, out)
}

// send is do with a request body.
func (c *Client) send(ctx context.Context, method, path string, query url.Values, body io.Reader, out any) error {
	u := c.baseURL + path
	if len(query) > 0 {
		u += "?" + query.Encode()
	}
	req, err := http.NewRequestWithContext(ctx, method, u, body)
	if err != nil {
		return fmt.Errorf("%s %s: %w", method, path, err)
	}
	req.Header.Set("Accept", "application/json")
	if body != nil {
		req.Header.Set("Content-Type", "text/plain; charset=utf-8")
	}
	resp, err := c.http.Do(req)
	if err != nil {
		return fmt.Errorf("%s %s: %w", method, path, err)
	}
	defer resp.Body.Close()
	if resp.StatusCode < 200 || resp.StatusCode > 299 {
		return readError(resp)
	}
	if err := json.NewDecoder(resp.Body).Decode(out); err != nil {
		return fmt.Errorf("%s %s: decode the answer: %w", method, path, err)
	}
	return nil
}

// readError turns an error answer into an *Error; a body that is not the
// API's JSON (a proxy's page, say) becomes the message as it is.
func readError(resp *http.Response) error {
	body, _ := io.ReadAll(io.LimitReader(resp.Body, maxErrorBody))
	e := &Error{StatusCode: resp.StatusCode}
	if json.Unmarshal(body, e) != nil || e.Message == "" {
		e.Message = string(bytes.TrimSpace(body))
	}
	if s, err := strconv.Atoi(resp.Header.Get("Retry-After")); err == nil && s >= 0 {
		e.RetryAfter = time.Duration(s) * time.Second
	}
	return e
}
