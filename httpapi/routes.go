package httpapi

import (
	"net/http"
	"sort"
	"strings"
)

// routes maps exact paths to per-method handlers; a path ending in "/" also
// serves every path below it that has no route of its own. Unlike http.ServeMux it
// answers unknown paths and wrong methods with JSON errors, as the API
// promises, with an Allow header on 405.
type routes map[string]map[string]http.HandlerFunc

func (rt routes) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	methods, ok := rt[r.URL.Path]
	if !ok {
		methods, ok = rt.subtree(r.URL.Path)
	}
	if !ok {
		writeError(w, http.StatusNotFound, "no such path: "+r.URL.Path)
		return
	}
	h, ok := methods[r.Method]
	if !ok {
		allowed := make([]string, 0, len(methods))
		for m := range methods {
			allowed = append(allowed, m)
		}
		sort.Strings(allowed)
		w.Header().Set("Allow", strings.Join(allowed, ", "))
		writeError(w, http.StatusMethodNotAllowed, "method "+r.Method+" not allowed on "+r.URL.Path+"; allowed: "+strings.Join(allowed, ", "))
		return
	}
	h(w, r)
}

// subtree finds the longest route ending in "/" that path is below.
func (rt routes) subtree(path string) (map[string]http.HandlerFunc, bool) {
	for i := len(path) - 1; i > 0; i-- {
		if path[i] != '/' || i == len(path)-1 {
			continue
		}
		if methods, ok := rt[path[:i+1]]; ok {
			return methods, true
		}
	}
	return nil, false
}
