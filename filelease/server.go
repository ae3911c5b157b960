package filelease

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"sync"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/uuid"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/apimachinery/pkg/version"
	"k8s.io/klog/v2"

	"github.com/leader-elector/leader-elector/serverclock"
)

// leasesPath is the collection of Leases of one namespace, as the API
// server names it.
const leasesPath = "/apis/coordination.k8s.io/v1/namespaces/{namespace}/leases"

var leaseResource = schema.GroupResource{Group: coordinationv1.GroupName, Resource: "leases"}

// maxBody bounds a request body: a Lease is well under a KiB.
const maxBody = 1 << 20

// Server answers the few requests of the Lease API the sidecar sends, from
// a file (see the package comment).
type Server struct {
	store  *store
	hub    *hub
	now    func() time.Time
	logger klog.Logger

	mu sync.Mutex
	// lastErr is the store's last read error, logged once until it changes.
	lastErr string
}

func newServer(path string, logger klog.Logger) *Server {
	return &Server{store: newStore(path), hub: newHub(), now: time.Now, logger: logger}
}

// Handler serves the Lease API; anything else is 404.
func (s *Server) Handler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /version", s.version)
	mux.HandleFunc("GET "+leasesPath, s.list)
	mux.HandleFunc("POST "+leasesPath, s.create)
	mux.HandleFunc("GET "+leasesPath+"/{name}", s.get)
	mux.HandleFunc("PUT "+leasesPath+"/{name}", s.update)
	mux.HandleFunc("DELETE "+leasesPath+"/{name}", s.delete)
	mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		writeError(w, apierrors.NewNotFound(schema.GroupResource{}, r.Method+" "+r.URL.Path+" (the file lease store serves the Lease API only)"))
	})
	return mux
}

// version answers /version, which the elector reads for the Date header
// (its clock, see package serverclock).
func (s *Server) version(w http.ResponseWriter, _ *http.Request) {
	writeJSON(w, http.StatusOK, version.Info{GitVersion: "filelease", Platform: "file"})
}

// refresh reads the store and hands its state to the watches.
func (s *Server) refresh(ctx context.Context) (state, error) {
	ticket := s.hub.ticket()
	st, _, err := s.store.read(ctx)
	s.report(err)
	if err != nil {
		return state{}, err
	}
	s.hub.apply(ticket, st)
	return st, nil
}

// report logs a store error once, and when the store is readable again.
func (s *Server) report(err error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	switch {
	case err != nil && err.Error() != s.lastErr:
		s.logger.Error(err, "The lease file cannot be used")
		s.lastErr = err.Error()
	case err == nil && s.lastErr != "":
		s.logger.Info("The lease file can be used again")
		s.lastErr = ""
	}
}

func (s *Server) get(w http.ResponseWriter, r *http.Request) {
	st, err := s.refresh(r.Context())
	if err != nil {
		writeError(w, apierrors.NewInternalError(err))
		return
	}
	l, ok := st.leases[key(r.PathValue("namespace"), r.PathValue("name"))]
	if !ok {
		writeError(w, apierrors.NewNotFound(leaseResource, r.PathValue("name")))
		return
	}
	writeJSON(w, http.StatusOK, withKind(l))
}

func (s *Server) list(w http.ResponseWriter, r *http.Request) {
	match, err := selection(r)
	if err != nil {
		writeError(w, apierrors.NewBadRequest(err.Error()))
		return
	}
	if r.URL.Query().Get("watch") == "true" {
		s.watch(w, r, match)
		return
	}
	st, err := s.refresh(r.Context())
	if err != nil {
		writeError(w, apierrors.NewInternalError(err))
		return
	}
	list := coordinationv1.LeaseList{
		TypeMeta: metav1.TypeMeta{Kind: "LeaseList", APIVersion: coordinationv1.SchemeGroupVersion.String()},
		ListMeta: metav1.ListMeta{ResourceVersion: strconv.FormatInt(st.resourceVersion, 10)},
		Items:    []coordinationv1.Lease{},
	}
	for _, k := range sortedKeys(st.leases) {
		if l := st.leases[k]; match(l) {
			list.Items = append(list.Items, *l)
		}
	}
	writeJSON(w, http.StatusOK, list)
}

// selection returns what a list or watch picks: the Leases of the path's
// namespace that its label and field selectors (metadata.name and
// metadata.namespace, the fields the API server offers on every object)
// match.
func selection(r *http.Request) (func(*coordinationv1.Lease) bool, error) {
	q := r.URL.Query()
	byLabel, err := labels.Parse(q.Get("labelSelector"))
	if err != nil {
		return nil, fmt.Errorf("labelSelector: %w", err)
	}
	byField, err := fields.ParseSelector(q.Get("fieldSelector"))
	if err != nil {
		return nil, fmt.Errorf("fieldSelector: %w", err)
	}
	for _, req := range byField.Requirements() {
		if req.Field != "metadata.name" && req.Field != "metadata.namespace" {
			return nil, fmt.Errorf("fieldSelector: field %q is not supported (only metadata.name and metadata.namespace)", req.Field)
		}
	}
	namespace := r.PathValue("namespace")
	return func(l *coordinationv1.Lease) bool {
		return l.Namespace == namespace && byLabel.Matches(labels.Set(l.Labels)) &&
			byField.Matches(fields.Set{"metadata.name": l.Name, "metadata.namespace": l.Namespace})
	}, nil
}

func (s *Server) create(w http.ResponseWriter, r *http.Request) {
	body, ok := readLease(w, r, "")
	if !ok {
		return
	}
	k := key(body.Namespace, body.Name)
	written, err := s.write(r.Context(), func(next *state, hw highWater) error {
		// A copy: change runs again if another write came first.
		lease := body.DeepCopy()
		if _, exists := next.leases[k]; exists {
			return apierrors.NewAlreadyExists(leaseResource, lease.Name)
		}
		lease.UID = uuid.NewUUID()
		lease.CreationTimestamp = metav1.NewTime(s.creationTime(hw.Tokens[k]))
		lease.ResourceVersion = strconv.FormatInt(next.resourceVersion, 10)
		next.leases[k] = lease
		return nil
	})
	if err != nil {
		writeError(w, err)
		return
	}
	writeJSON(w, http.StatusCreated, withKind(written.leases[k]))
}

// creationTime is the creation time of a Lease created anew: now, but not
// before serverclock.Epoch plus as many seconds as the highest token
// written on an earlier Lease of that name. The elector gives a term on a
// Lease object created t seconds after the epoch a token above t, so a
// Lease deleted (with its file) and created again never gets a token that
// was used before, whatever the clock says.
func (s *Server) creationTime(highestToken int32) time.Time {
	now := s.now().Truncate(time.Second)
	floor := serverclock.Epoch.Add(time.Duration(highestToken) * time.Second)
	if now.Before(floor) {
		return floor
	}
	return now
}

func (s *Server) update(w http.ResponseWriter, r *http.Request) {
	body, ok := readLease(w, r, r.PathValue("name"))
	if !ok {
		return
	}
	k := key(body.Namespace, body.Name)
	written, err := s.write(r.Context(), func(next *state, _ highWater) error {
		// A copy: change runs again, on the newer state, if another write
		// came first, and must compare the request's resourceVersion.
		lease := body.DeepCopy()
		stored, exists := next.leases[k]
		switch {
		case !exists:
			return apierrors.NewNotFound(leaseResource, lease.Name)
		case lease.ResourceVersion != "" && lease.ResourceVersion != stored.ResourceVersion,
			lease.UID != "" && lease.UID != stored.UID:
			return apierrors.NewConflict(leaseResource, lease.Name, errors.New("the object has been modified; please apply your changes to the latest version and try again"))
		}
		lease.UID, lease.CreationTimestamp = stored.UID, stored.CreationTimestamp
		lease.ResourceVersion = strconv.FormatInt(next.resourceVersion, 10)
		next.leases[k] = lease
		return nil
	})
	if err != nil {
		writeError(w, err)
		return
	}
	writeJSON(w, http.StatusOK, withKind(written.leases[k]))
}

func (s *Server) delete(w http.ResponseWriter, r *http.Request) {
	var opts metav1.DeleteOptions
	if r.ContentLength != 0 {
		if err := json.NewDecoder(http.MaxBytesReader(w, r.Body, maxBody)).Decode(&opts); err != nil {
			writeError(w, apierrors.NewBadRequest("the body is not DeleteOptions: "+err.Error()))
			return
		}
	}
	if len(opts.DryRun) > 0 || r.URL.Query().Has("dryRun") {
		writeError(w, apierrors.NewBadRequest("dryRun is not supported by the file lease store"))
		return
	}
	name := r.PathValue("name")
	k := key(r.PathValue("namespace"), name)
	_, err := s.write(r.Context(), func(next *state, _ highWater) error {
		stored, exists := next.leases[k]
		if !exists {
			return apierrors.NewNotFound(leaseResource, name)
		}
		if p := opts.Preconditions; p != nil && (p.UID != nil && *p.UID != stored.UID || p.ResourceVersion != nil && *p.ResourceVersion != stored.ResourceVersion) {
			return apierrors.NewConflict(leaseResource, name, errors.New("the object's UID or resourceVersion does not match the preconditions"))
		}
		delete(next.leases, k)
		return nil
	})
	if err != nil {
		writeError(w, err)
		return
	}
	writeJSON(w, http.StatusOK, metav1.Status{TypeMeta: metav1.TypeMeta{Kind: "Status", APIVersion: "v1"}, Status: metav1.StatusSuccess})
}

// write changes the store and hands the new state to the watches before
// the answer, so that a client's next watch sees its own write.
func (s *Server) write(ctx context.Context, change func(next *state, written highWater) error) (state, error) {
	st, err := s.store.update(ctx, change)
	if err != nil {
		var status apierrors.APIStatus
		if !errors.As(err, &status) {
			s.report(err)
			err = apierrors.NewInternalError(err)
		}
		return state{}, err
	}
	s.report(nil)
	s.hub.apply(s.hub.ticket(), st)
	return st, nil
}

// readLease decodes and checks the Lease of a create (name "") or an
// update of name, as the API server's validation would.
func readLease(w http.ResponseWriter, r *http.Request, name string) (*coordinationv1.Lease, bool) {
	lease := &coordinationv1.Lease{}
	if err := json.NewDecoder(http.MaxBytesReader(w, r.Body, maxBody)).Decode(lease); err != nil {
		writeError(w, apierrors.NewBadRequest("the body is not a Lease: "+err.Error()))
		return nil, false
	}
	namespace := r.PathValue("namespace")
	if lease.Namespace == "" {
		lease.Namespace = namespace
	}
	var problems []string
	switch {
	case lease.Namespace != namespace:
		problems = append(problems, fmt.Sprintf("metadata.namespace %q does not match the path's %q", lease.Namespace, namespace))
	case name != "" && lease.Name != name:
		problems = append(problems, fmt.Sprintf("metadata.name %q does not match the path's %q", lease.Name, name))
	case lease.Name == "":
		problems = append(problems, "metadata.name is required (generateName is not supported)")
	}
	// A DNS-1123 subdomain is also a valid path segment (no "/", "%", "..").
	problems = append(problems, validation.IsDNS1123Subdomain(lease.Name)...)
	if d := lease.Spec.LeaseDurationSeconds; d != nil && *d <= 0 {
		problems = append(problems, "spec.leaseDurationSeconds must be greater than 0")
	}
	if t := lease.Spec.LeaseTransitions; t != nil && *t < 0 {
		problems = append(problems, "spec.leaseTransitions must not be negative")
	}
	if len(problems) > 0 {
		writeError(w, apierrors.NewBadRequest(fmt.Sprintf("invalid Lease %q: %v", lease.Name, problems)))
		return nil, false
	}
	lease.TypeMeta, lease.ManagedFields = metav1.TypeMeta{}, nil
	return lease, true
}

// withKind returns l as the API server sends it: with its kind.
func withKind(l *coordinationv1.Lease) *coordinationv1.Lease {
	out := l.DeepCopy()
	out.TypeMeta = metav1.TypeMeta{Kind: "Lease", APIVersion: coordinationv1.SchemeGroupVersion.String()}
	return out
}

func writeJSON(w http.ResponseWriter, code int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	_ = json.NewEncoder(w).Encode(v)
}

// writeError answers err as the API server does: a Status with its code,
// which client-go turns back into the same error (apierrors.IsConflict...).
func writeError(w http.ResponseWriter, err error) {
	var status apierrors.APIStatus
	if !errors.As(err, &status) {
		status = apierrors.NewInternalError(err)
	}
	st := status.Status()
	st.TypeMeta = metav1.TypeMeta{Kind: "Status", APIVersion: "v1"}
	writeJSON(w, int(st.Code), st)
}
