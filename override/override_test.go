package override

import (
	"context"
	"testing"
	"time"

	"github.com/redis/rueidis"
	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/internal/redistest"
)

func ov(policy, id string, rate int64, expires time.Time) Override {
	return Override{Policy: policy, Identity: id, Spec: Spec{Algorithm: "gcra", Rate: rate, Period: "1m"}, Expires: expires}
}

// TestSetMostSpecificWins: an exact identity before every pattern, then the longest
// pattern; overrides of other policies and expired ones never apply.
func TestSetMostSpecificWins(t *testing.T) {
	now := time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)
	s := NewSet([]Override{
		ov("api", "*", 1, time.Time{}),
		ov("api", "org-42:*", 2, time.Time{}),
		ov("api", "org-42:team-1:*", 3, time.Time{}),
		ov("api", "org-42:team-1:alice", 4, time.Time{}),
		ov("api", "org-42:team-1:bob", 5, now.Add(time.Second)),
		ov("other", "org-43:x", 6, time.Time{}),
		{Policy: "api", Identity: "bad", Spec: Spec{Rate: 0, Period: "1m"}}, // invalid: ignored
	}, now)
	for id, want := range map[string]int64{
		"org-42:team-1:alice": 4, "org-42:team-1:bob": 5, "org-42:team-1:carol": 3,
		"org-42:team-2:x": 2, "org-43:x": 1, "bad": 1,
	} {
		o, ok := s.Lookup("api", id, now)
		if !ok || o.Limit.Rate != want {
			t.Errorf("%s: %v %v, want rate %d", id, o, ok, want)
		}
	}
	if o, _ := s.Lookup("api", "org-42:team-1:bob", now.Add(time.Second)); o.Limit.Rate != 3 {
		t.Errorf("expired exact override still applies: %v", o)
	}
	if _, ok := s.Lookup("nosuch", "x", now); ok {
		t.Error("an override of no policy applied")
	}
	if got := len(s.List("api", now)); got != 5 {
		t.Errorf("List: %d", got)
	}
	if !s.Expired(now.Add(time.Second)) || s.Expired(now) {
		t.Error("Expired")
	}
	if o, ok := s.Get("api", "org-42:*", now); !ok || o.Limit != (sluice.Limit{Algorithm: sluice.GCRA, Rate: 2, Period: time.Minute}) {
		t.Errorf("Get pattern: %v %v", o, ok)
	}
}

// TestStores: Memory and Redis keep, version and delete overrides alike.
func TestStores(t *testing.T) {
	srv := redistest.Start(t)
	client, err := rueidis.NewClient(rueidis.ClientOption{InitAddress: []string{srv.Addr()}, DisableCache: true})
	if err != nil {
		t.Fatal(err)
	}
	defer client.Close()
	ctx := context.Background()
	for name, st := range map[string]Store{"memory": NewMemory(), "redis": NewRedis(func() rueidis.Client { return client }, "sluice:")} {
		t.Run(name, func(t *testing.T) {
			v0, _ := st.Version(ctx)
			if prev, err := st.Put(ctx, ov("api", "a", 1, time.Time{})); err != nil || prev != nil {
				t.Fatalf("Put: %v %v", prev, err)
			}
			if prev, err := st.Put(ctx, ov("api", "a", 2, time.Time{})); err != nil || prev == nil || prev.Spec.Rate != 1 {
				t.Fatalf("Put again: %v %v", prev, err)
			}
			list, v, err := st.Load(ctx)
			if err != nil || len(list) != 1 || list[0].Spec.Rate != 2 || v == v0 {
				t.Fatalf("Load: %v %d %v", list, v, err)
			}
			if gone, err := st.Delete(ctx, "api", "a"); err != nil || gone == nil {
				t.Fatalf("Delete: %v %v", gone, err)
			}
			if gone, err := st.Delete(ctx, "api", "a"); err != nil || gone != nil {
				t.Fatalf("Delete again: %v %v", gone, err)
			}
			if v2, _ := st.Version(ctx); v2 == v {
				t.Fatal("Delete did not move the version")
			}
		})
	}
}
