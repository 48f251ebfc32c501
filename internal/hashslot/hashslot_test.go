package hashslot

import "testing"

// TestOf: the slots Redis's cluster specification and CLUSTER KEYSLOT give.
func TestOf(t *testing.T) {
	for _, tc := range []struct {
		key  string
		want uint16
	}{
		{"123456789", 0x31c3 % 16384},
		{"", 0},
		{"foo", 12182},
		{"{user1000}.following", 3443},
		{"{user1000}.followers", 3443},
		{"user1000", 3443},
		{"foo{}{bar}", Tag("foo{}{bar}")},
		{"foo{{bar}}zap", Tag("{bar")},
		{"foo{bar}{zap}", Tag("bar")},
	} {
		if got := Of(tc.key); got != tc.want {
			t.Errorf("Of(%q) = %d, want %d", tc.key, got, tc.want)
		}
	}
}
