package sfv

import (
	"math"
	"testing"

	"github.com/dunglas/httpsfv"
)

// TestAppendString: any name gives a String that a structured-field parser reads back,
// with bytes outside printable ASCII written as %XX.
func TestAppendString(t *testing.T) {
	for _, tc := range []struct{ in, want string }{
		{"edge.remote_address", "edge.remote_address"},
		{`a"b\c`, `a"b\c`},
		{"caf\xc3\xa9", "caf%C3%A9"},
		{"tab\there\n", "tab%09here%0A"},
		{"", ""},
	} {
		b := string(AppendString(nil, tc.in))
		it, err := httpsfv.UnmarshalItem([]string{b})
		if err != nil {
			t.Fatalf("%q -> %s: %v", tc.in, b, err)
		}
		if got := it.Value.(string); got != tc.want {
			t.Errorf("%q -> %q, want %q", tc.in, got, tc.want)
		}
	}
}

// FuzzAppend: what the appenders write parses as the List httpsfv parses, with the values
// given (clamped, and a String's non-printable bytes as %XX).
func FuzzAppend(f *testing.F) {
	f.Add("per-ip", int64(7), int64(-3), "api_key:abc")
	f.Add("a\"b\\c", int64(math.MaxInt64), int64(math.MinInt64), "\x00\xff")
	f.Add("é\n", int64(MaxInteger), int64(-MaxInteger), "")
	f.Fuzz(func(t *testing.T, name string, r, q int64, pk string) {
		b := AppendString(nil, name)
		b = AppendIntParam(b, "r", r)
		b = AppendIntParam(b, "q", q)
		b = AppendBytesParam(b, "pk", pk)
		b = append(b, ", "...)
		b = AppendString(b, "second")
		l, err := httpsfv.UnmarshalList([]string{string(b)})
		if err != nil {
			t.Fatalf("%q does not parse: %v", b, err)
		}
		if len(l) != 2 {
			t.Fatalf("%q: %d members, want 2", b, len(l))
		}
		it := l[0].(httpsfv.Item)
		if want := escaped(name); it.Value != want {
			t.Errorf("%q: name %q, want %q", b, it.Value, want)
		}
		clamp := func(v int64) int64 { return max(-MaxInteger, min(v, MaxInteger)) }
		if v, _ := it.Params.Get("r"); v != clamp(r) {
			t.Errorf("%q: r=%v, want %d", b, v, clamp(r))
		}
		if v, _ := it.Params.Get("q"); v != clamp(q) {
			t.Errorf("%q: q=%v, want %d", b, v, clamp(q))
		}
		if v, _ := it.Params.Get("pk"); string(v.([]byte)) != pk {
			t.Errorf("%q: pk=%q, want %q", b, v, pk)
		}
		if name == escaped(name) {
			// Valid input is serialized as httpsfv serializes it.
			want, err := httpsfv.Marshal(l)
			if err != nil || want != string(b) {
				t.Errorf("wrote %q, httpsfv writes %q (%v)", b, want, err)
			}
		}
	})
}

// escaped is s with the bytes a String cannot hold written as %XX.
func escaped(s string) string {
	var b []byte
	for i := 0; i < len(s); i++ {
		if c := s[i]; c < 0x20 || c > 0x7e {
			b = append(b, '%', "0123456789ABCDEF"[c>>4], "0123456789ABCDEF"[c&15])
		} else {
			b = append(b, c)
		}
	}
	return string(b)
}

// FuzzValidString: ValidString holds exactly for the strings a structured-field
// serializer accepts as a String as they are.
func FuzzValidString(f *testing.F) {
	for _, s := range []string{"per-ip", "", `a"b\c`, "caf\xc3\xa9", "tab\t", "\x7f", "~ "} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		_, err := httpsfv.Marshal(httpsfv.List{httpsfv.NewItem(s)})
		if got := ValidString(s); got != (err == nil) {
			t.Errorf("ValidString(%q) = %v, httpsfv.Marshal error: %v", s, got, err)
		}
	})
}
