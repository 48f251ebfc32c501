package server

import (
	"testing"

	"github.com/dunglas/httpsfv"
)

// TestSFString: any name gives a String that a structured-field parser reads back, with
// bytes outside printable ASCII written as %XX.
func TestSFString(t *testing.T) {
	for _, tc := range []struct{ in, want string }{
		{"edge.remote_address", "edge.remote_address"},
		{`a"b\c`, `a"b\c`},
		{"caf\xc3\xa9", "caf%C3%A9"},
		{"tab\there\n", "tab%09here%0A"},
		{"", ""},
	} {
		b := string(appendSFString(nil, tc.in))
		it, err := httpsfv.UnmarshalItem([]string{b})
		if err != nil {
			t.Fatalf("%q -> %s: %v", tc.in, b, err)
		}
		if got := it.Value.(string); got != tc.want {
			t.Errorf("%q -> %q, want %q", tc.in, got, tc.want)
		}
	}
}
