package apitest

import (
	"fmt"
	"io"
	"net/http"
	"strings"
	"time"

	"github.com/leader-elector/leader-elector/api"
)

// events answers GET /events: server-sent events, one at connect time and
// one per change ("leader", after a "lost" when this pod's term ended; in
// partition mode "partitions"), and a keep-alive comment between.
func (s *Sidecar) events(w http.ResponseWriter, r *http.Request) {
	if len(r.URL.Query()) > 0 {
		writeError(w, http.StatusBadRequest, "GET "+r.URL.Path+" takes no query parameters")
		return
	}
	w.Header().Set("Content-Type", "text/event-stream")
	w.Header().Set("Cache-Control", "no-cache")
	w.Header().Set("X-Accel-Buffering", "no")
	w.WriteHeader(http.StatusOK)
	keepAlive := time.NewTicker(s.cfg.KeepAlive)
	defer keepAlive.Stop()
	st := &streamState{first: true}
	for {
		s.mu.Lock()
		chunk, changed := s.nextEvents(st), s.changed
		s.mu.Unlock()
		if chunk != "" && s.send(w, chunk) != nil {
			return
		}
		select {
		case <-changed:
		case <-keepAlive.C:
			if s.send(w, ": keep-alive\n\n") != nil {
				return
			}
		case <-r.Context().Done():
			return
		case <-s.closed:
			return
		}
	}
}

// streamState is what one stream has told its client.
type streamState struct {
	first    bool
	revision uint64
	lostSeq  int
}

// nextEvents returns the events that tell a stream of the current state
// ("" if it has been told), as the sidecar writes them. Called with mu
// held.
func (s *Sidecar) nextEvents(st *streamState) string {
	s.expire()
	event, rev, data := "leader", s.leader.revision, any(s.leaderJSON())
	if s.cfg.Partitions > 0 {
		event, rev, data = "partitions", s.parts.revision, s.partitionsJSON()
	}
	if !st.first && rev == st.revision {
		return ""
	}
	var b strings.Builder
	if l := s.leader; !st.first && l.lostSeq != st.lostSeq && l.lost != nil {
		lost := api.Lost{Reason: l.lost.Reason, At: l.lost.At, FencingToken: l.lost.FencingToken, Holder: l.holder}
		fmt.Fprintf(&b, "event: lost\ndata: %s\n\n", marshalJSON(lost))
	}
	fmt.Fprintf(&b, "id: %d\nevent: %s\ndata: %s\n\n", rev, event, marshalJSON(data))
	st.first, st.revision, st.lostSeq = false, rev, s.leader.lostSeq
	return b.String()
}

func (s *Sidecar) send(w http.ResponseWriter, chunk string) error {
	if _, err := io.WriteString(w, chunk); err != nil {
		return err
	}
	return http.NewResponseController(w).Flush()
}
