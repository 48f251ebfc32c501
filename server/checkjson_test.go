package server

import (
	"bytes"
	"encoding/json"
	"math/rand/v2"
	"testing"
)

// TestCheckResponseJSON: appendCheckResponse writes what json.Marshal writes, for every
// field set or empty and for text JSON must escape (HTML characters, controls, invalid
// UTF-8, U+2028).
func TestCheckResponseJSON(t *testing.T) {
	texts := []string{"", "edge.api_1", "a b", `q"uote`, `back\slash`, "<script>&", "tab\there", "nl\n\r\b\f\x00\x1f", "\xff\xfe", "é ü 日本", "\u2028\u2029", "\x7f"}
	ints := []int64{0, 1, -1, 999, 1 << 53, -1 << 63}
	rng := rand.New(rand.NewPCG(1, 2))
	str := func() string { return texts[rng.IntN(len(texts))] }
	num := func() int64 { return ints[rng.IntN(len(ints))] }
	limit := func() LimitStatus {
		return LimitStatus{
			Name: str(), Status: str(), OverLimit: rng.IntN(2) == 0, Shadow: rng.IntN(2) == 0,
			Source: str(), Route: str(), Algorithm: str(), Rate: num(), Period: str(), Burst: num(),
			LeaseTTL: str(), Lease: str(), Reservation: str(), Zone: str(), AnchorDay: int(num() % 40),
			WindowSeconds: num(), Remaining: num(), ResetAfterMs: num(), RetryAfterMs: num(), DecidedBy: str(),
		}
	}
	cases := []CheckResponse{
		{},
		{Allowed: true, Limits: []LimitStatus{}},
		{Allowed: true, Limits: []LimitStatus{{Status: "no_match"}}},
		{RetryAfterMs: 1500, Limits: []LimitStatus{{Name: "edge.api", Status: "limited", OverLimit: true, Algorithm: "fixed_window", Rate: 10, Period: "1s", RetryAfterMs: 1500, DecidedBy: "store"}}},
	}
	for range 2000 {
		r := CheckResponse{Allowed: rng.IntN(2) == 0, RetryAfterMs: num()}
		for range rng.IntN(4) {
			r.Limits = append(r.Limits, limit())
		}
		cases = append(cases, r)
	}
	for _, r := range cases {
		want, err := json.Marshal(r)
		if err != nil {
			t.Fatal(err)
		}
		if got := appendCheckResponse(nil, &r); !bytes.Equal(got, want) {
			t.Fatalf("%+v:\n got %s\nwant %s", r, got, want)
		}
	}
}
