// Package route matches a request to a route pattern, for every front end that limits by
// route: package httplimit (and so `sluice proxy`) and the JSON API's policies (package
// config). Patterns are net/http ServeMux patterns ("POST /v1/items", "/admin/",
// "api.example.com/"), with ServeMux's precedence: the most specific pattern wins.
//
// A client must not dodge a route's limit by spelling the path another way that the
// upstream serves as the same resource, so a path is normalised before it is matched,
// after the rules of Envoy's normalize_path and merge_slashes and of the upstreams
// behind a proxy:
//
//  1. It is percent-decoded: /v1%2Fitems is /v1/items, as most upstreams decode it.
//  2. Each segment's parameters are dropped: /v1/items;x=y is /v1/items, as servlet
//     containers and Spring drop them.
//  3. Slashes are merged and "." and ".." segments resolved: /v1//./items is /v1/items.
//  4. A trailing slash is dropped: /v1/items/ is /v1/items. A subtree pattern ("/dir/")
//     matches its own name without the slash (/dir), as ServeMux redirects it there.
//  5. Letters are lower-cased: /V1/ITEMS is /v1/items. Patterns are lower-cased too
//     (Pattern), so matching ignores case, as case-insensitive upstreams do.
//
// The method and the host are matched as ServeMux matches them. Normalisation only
// chooses the route: the request is forwarded as it came.
package route

import (
	"fmt"
	"net/http"
	"path"
	"regexp"
	"strings"
)

// Pattern returns the form of a route pattern that Register adds to a ServeMux: its path,
// from the first '/', lower-cased; the method and the host as written.
func Pattern(p string) string {
	i := strings.IndexByte(p, '/')
	if i < 0 {
		return p
	}
	return p[:i] + strings.ToLower(p[i:])
}

// Path returns the normalised form of a decoded request path (see the package doc).
func Path(p string) string {
	if strings.IndexByte(p, ';') >= 0 {
		segs := strings.Split(p, "/")
		for i, s := range segs {
			if j := strings.IndexByte(s, ';'); j >= 0 {
				segs[i] = s[:j]
			}
		}
		p = strings.Join(segs, "/")
	}
	if p == "" || p[0] != '/' {
		p = "/" + p
	}
	return strings.ToLower(path.Clean(p))
}

// Handler marks a route registered in a ServeMux with Register: its index among the
// caller's routes. It is never served.
type Handler int

func (Handler) ServeHTTP(http.ResponseWriter, *http.Request) {}

// Register adds pattern, as Pattern writes it, to mux as route i. A malformed pattern, or
// one that conflicts with a pattern already added, is an error (ServeMux's panic, in one
// line).
func Register(mux *http.ServeMux, pattern string, i int) (err error) {
	defer func() {
		if r := recover(); r != nil {
			msg := fmt.Sprint(r)
			msg = strings.TrimPrefix(msg, "http: ")
			msg = registeredAt.ReplaceAllString(msg, "")
			msg = strings.Join(strings.Fields(strings.ReplaceAll(strings.ReplaceAll(msg, ":\n", ": "), "\n", "; ")), " ")
			err = fmt.Errorf("invalid route pattern: %s", msg)
		}
	}()
	if pattern == "" {
		return fmt.Errorf("invalid route pattern: empty")
	}
	mux.Handle(Pattern(pattern), Handler(i))
	return nil
}

var registeredAt = regexp.MustCompile(` \(registered at [^)]*\)`)

// Match returns the index of the route mux chooses for r's normalised path, or false when
// none matches. mux holds routes added by Register.
func Match(mux *http.ServeMux, r *http.Request) (int, bool) {
	if r.URL == nil {
		return 0, false
	}
	p := Path(r.URL.Path)
	r2 := *r
	u := *r.URL
	u.Path, u.RawPath = p, ""
	r2.URL = &u
	h, _ := mux.Handler(&r2)
	if _, ok := h.(Handler); !ok && p != "/" {
		// ServeMux redirects /dir to a "/dir/" subtree: the subtree matches.
		u.Path = p + "/"
		h, _ = mux.Handler(&r2)
	}
	i, ok := h.(Handler)
	return int(i), ok
}
