package sluice_test

import (
	"encoding/json"
	"errors"
	"testing"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/store"
)

// TestIDText checks the text of lease and reservation ids: base 36, "" for the zero id,
// round trips through String/UnmarshalText and JSON, and errors for anything no store gives.
func TestIDText(t *testing.T) {
	for _, v := range []uint64{1, 35, 36, 123456789, store.MaxLeaseID} {
		l, r := sluice.LeaseID(v), sluice.ReservationID(v)
		var gl sluice.LeaseID
		if err := gl.UnmarshalText([]byte(l.String())); err != nil || gl != l {
			t.Errorf("lease %d: %q parses to %v, %v", v, l.String(), gl, err)
		}
		var gr sluice.ReservationID
		if err := gr.UnmarshalText([]byte(r.String())); err != nil || gr != r {
			t.Errorf("reservation %d: %q parses to %v, %v", v, r.String(), gr, err)
		}
	}
	if s := sluice.LeaseID(36).String(); s != "10" {
		t.Errorf("LeaseID(36) = %q, want base 36", s)
	}
	if sluice.LeaseID(0).String() != "" || sluice.ReservationID(0).String() != "" {
		t.Error("the zero id's text is not empty")
	}
	for _, s := range []string{"0", "not an id", "-1", "2gosa7pa2gw" /* MaxLeaseID+1 */, "000000000001"} {
		var l sluice.LeaseID
		if err := l.UnmarshalText([]byte(s)); !errors.Is(err, sluice.ErrInvalidLease) {
			t.Errorf("LeaseID.UnmarshalText(%q): %v, want ErrInvalidLease", s, err)
		}
		var r sluice.ReservationID
		if err := r.UnmarshalText([]byte(s)); !errors.Is(err, sluice.ErrUnknownReservation) {
			t.Errorf("ReservationID.UnmarshalText(%q): %v, want ErrUnknownReservation", s, err)
		}
	}

	type doc struct {
		Lease       sluice.LeaseID       `json:"lease,omitempty"`
		Reservation sluice.ReservationID `json:"reservation,omitempty"`
	}
	for _, d := range []doc{{}, {Lease: 1234567, Reservation: store.MaxLeaseID}} {
		raw, err := json.Marshal(d)
		if err != nil {
			t.Fatal(err)
		}
		var back doc
		if err := json.Unmarshal(raw, &back); err != nil || back != d {
			t.Errorf("%s: round trip gave %+v, %v", raw, back, err)
		}
	}
	if raw, _ := json.Marshal(doc{Lease: 36}); string(raw) != `{"lease":"10"}` {
		t.Errorf("JSON text %s, want the base-36 string, the zero reservation omitted", raw)
	}
	var d doc
	if err := json.Unmarshal([]byte(`{"lease":"!"}`), &d); !errors.Is(err, sluice.ErrInvalidLease) {
		t.Errorf("bad lease in JSON: %v", err)
	}
}
