package httpapi

import (
	"net/http"
	"net/url"
	"sort"
	"strings"
)

// routes maps exact paths to per-method handlers; a path ending in "/" also
// serves every path below it that has no route of its own. Unlike http.ServeMux it
// answers unknown paths and wrong methods with JSON errors, as the API
// promises, with an Allow header on 405, and a malformed query string with
// 400.
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
	// The one check of the query string, before any handler acts:
	// r.URL.Query() drops what it cannot parse (a bad escape, a ";"
	// separator) without a word, and POST /release?% would release.
	if _, err := url.ParseQuery(r.URL.RawQuery); err != nil {
		writeError(w, http.StatusBadRequest, "malformed query string: "+err.Error())
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
