package filelease

import (
	"encoding/json"
	"fmt"
	"net/http"
	"strconv"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/watch"
)

// initialEventsEnd is the annotation of the bookmark that ends a watch
// list's initial events (metav1.InitialEventsAnnotationKey).
const initialEventsEnd = metav1.InitialEventsAnnotationKey

// watch streams the changes of the Leases match picks, as the API server
// does: one JSON watch event after the other. A watch with
// sendInitialEvents (client-go's watch list) gets the current Leases as
// additions first, then the bookmark that ends them.
func (s *Server) watch(w http.ResponseWriter, r *http.Request, match func(*coordinationv1.Lease) bool) {
	q := r.URL.Query()
	initial := q.Get("sendInitialEvents") == "true"
	from := int64(-1)
	if rv := q.Get("resourceVersion"); !initial && rv != "" && rv != "0" {
		var err error
		if from, err = strconv.ParseInt(rv, 10, 64); err != nil || from < 0 {
			writeError(w, apierrors.NewBadRequest(fmt.Sprintf("resourceVersion %q is not a resourceVersion of this store", rv)))
			return
		}
	}
	timeout, err := watchTimeout(q.Get("timeoutSeconds"))
	if err != nil {
		writeError(w, apierrors.NewBadRequest(err.Error()))
		return
	}
	if _, err := s.refresh(r.Context()); err != nil && !s.hub.isLoaded() {
		writeError(w, apierrors.NewInternalError(err))
		return
	}
	watcher, current, tooOld := s.hub.watch(match, from)
	if tooOld != nil {
		writeError(w, apierrors.NewResourceExpired(fmt.Sprintf("too old resource version: %d (%d)", from, tooOld.oldest)))
		return
	}
	defer s.hub.stop(watcher)
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(http.StatusOK)
	// The client waits for the headers before it reads any event.
	flusher, _ := w.(http.Flusher)
	if flusher != nil {
		flusher.Flush()
	}
	send := func(typ watch.EventType, obj any) bool {
		b, err := json.Marshal(metaWatchEvent{Type: string(typ), Object: obj})
		if err == nil {
			_, err = w.Write(append(b, '\n'))
		}
		if err == nil && flusher != nil && len(watcher.events) == 0 {
			flusher.Flush()
		}
		return err == nil
	}
	bookmarkPending := initial
	timer := time.NewTimer(timeout)
	defer timer.Stop()
	for {
		if bookmarkPending && len(watcher.events) == 0 {
			bookmarkPending = false
			if !send(watch.Bookmark, bookmark(current)) {
				return
			}
		}
		select {
		case ev := <-watcher.events:
			if !send(ev.typ, withKind(ev.lease)) {
				return
			}
		case <-watcher.closed:
			return
		case <-timer.C:
			return
		case <-r.Context().Done():
			return
		}
	}
}

type metaWatchEvent struct {
	Type   string `json:"type"`
	Object any    `json:"object"`
}

// bookmark is the event that ends a watch list's initial events at
// resourceVersion rv.
func bookmark(rv int64) *coordinationv1.Lease {
	return &coordinationv1.Lease{
		TypeMeta: metav1.TypeMeta{Kind: "Lease", APIVersion: coordinationv1.SchemeGroupVersion.String()},
		ObjectMeta: metav1.ObjectMeta{
			ResourceVersion: strconv.FormatInt(rv, 10),
			Annotations:     map[string]string{initialEventsEnd: "true"},
		},
	}
}

// maxWatchTimeout is the longest a watch runs before it ends and its
// reflector watches again, the API server's default --min-request-timeout
// doubled (a watch without timeoutSeconds gets it).
const maxWatchTimeout = 30 * time.Minute

func watchTimeout(s string) (time.Duration, error) {
	if s == "" || s == "0" {
		return maxWatchTimeout, nil
	}
	n, err := strconv.ParseInt(s, 10, 64)
	if err != nil || n < 0 {
		return 0, fmt.Errorf("timeoutSeconds %q is not a number of seconds", s)
	}
	return min(time.Duration(n)*time.Second, maxWatchTimeout), nil
}
