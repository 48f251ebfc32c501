package quota

import (
	"context"
	"testing"
	"time"
)

// TestMemoryMaxClients: WithMaxClients bounds the entries over every bucket: one more is
// answered as a full bucket, and entries whose TTL passed make room again (issue 39, item
// 5: a client reconnecting with new buckets grew the store until their TTLs).
func TestMemoryMaxClients(t *testing.T) {
	now := time.Unix(1_000_000, 0)
	m := NewMemory(func() time.Time { return now }, WithMaxClients(3))
	out := make([]Assignment, 1)
	report := func(key, client string) int64 {
		t.Helper()
		if err := m.Rebalance(context.Background(), []Report{{Key: key, Client: client, Rate: 100, Weight: WeightScale, TTL: time.Minute}}, out); err != nil {
			t.Fatal(err)
		}
		return out[0].Rate
	}
	for i, c := range [][2]string{{"a", "1"}, {"a", "2"}, {"b", "1"}} {
		if r := report(c[0], c[1]); r < 0 {
			t.Fatalf("entry %d of 3 refused", i+1)
		}
	}
	if r := report("c", "1"); r != -1 {
		t.Errorf("a 4th entry in a new bucket: rate %d, want -1", r)
	}
	if r := report("a", "3"); r != -1 {
		t.Errorf("a 4th entry in a bucket held: rate %d, want -1", r)
	}
	if r := report("a", "1"); r < 0 {
		t.Errorf("an entry held, reported again: refused")
	}
	if m.Buckets() != 2 {
		t.Errorf("%d buckets held, want 2 (a refused bucket is not kept)", m.Buckets())
	}
	now = now.Add(2 * time.Minute)
	if r := report("c", "1"); r < 0 {
		t.Error("with every entry past its TTL, a new one refused")
	}
}
