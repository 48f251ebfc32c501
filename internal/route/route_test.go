package route

import (
	"net/http"
	"net/http/httptest"
	"testing"
)

func TestPath(t *testing.T) {
	for in, want := range map[string]string{
		"/v1/items":         "/v1/items",
		"/v1/items/":        "/v1/items",
		"/v1/items;x=y":     "/v1/items",
		"/v1;a=b/items;c/":  "/v1/items",
		"/V1/ITEMS":         "/v1/items",
		"//v1///items":      "/v1/items",
		"/v1/./x/../items":  "/v1/items",
		"/../../etc/passwd": "/etc/passwd",
		"/":                 "/",
		"":                  "/",
		"v1/items":          "/v1/items",
		"/;x":               "/",
	} {
		if got := Path(in); got != want {
			t.Errorf("Path(%q) = %q, want %q", in, got, want)
		}
	}
}

func TestMatch(t *testing.T) {
	mux := http.NewServeMux()
	patterns := []string{"POST /v1/Items", "/dir/", "GET /v1/items/{id}", "api.example.com/"}
	for i, p := range patterns {
		if err := Register(mux, p, i); err != nil {
			t.Fatal(err)
		}
	}
	if err := Register(mux, "POST /v1/items", 9); err == nil {
		t.Error("a pattern differing only in case from another registered")
	}
	for _, tt := range []struct {
		method, target string
		want           int // -1: none
	}{
		{"POST", "/v1/items", 0},
		{"POST", "/V1/items/", 0},
		{"POST", "/v1%2Fitems", 0},
		{"GET", "/dir", 1},
		{"GET", "/DIR/a/b/", 1},
		{"HEAD", "/v1/items/42;v=1", 2},
		{"GET", "http://api.example.com/x", 3},
		{"GET", "/v1/items", -1},
		{"GET", "/other", -1},
	} {
		i, ok := Match(mux, httptest.NewRequest(tt.method, tt.target, nil))
		if !ok {
			i = -1
		}
		if i != tt.want {
			t.Errorf("%s %s: route %d, want %d", tt.method, tt.target, i, tt.want)
		}
	}
}
