package sluice_test

import (
	"encoding/json"
	"errors"
	"testing"

	"github.com/sluicehq/sluice"
)

// TestIDText checks the text of lease and reservation ids: base 36, "" for the zero id,
// round trips through String/Parse and JSON, and errors for anything no store gives.
func TestIDText(t *testing.T) {
	for _, v := range []uint64{1, 35, 36, 123456789, sluice.MaxLeaseID} {
		l, r := sluice.LeaseID(v), sluice.ReservationID(v)
		if got, err := sluice.ParseLeaseID(l.String()); err != nil || got != l {
			t.Errorf("lease %d: %q parses to %v, %v", v, l.String(), got, err)
		}
		if got, err := sluice.ParseReservationID(r.String()); err != nil || got != r {
			t.Errorf("reservation %d: %q parses to %v, %v", v, r.String(), got, err)
		}
	}
	if s := sluice.LeaseID(36).String(); s != "10" {
		t.Errorf("LeaseID(36) = %q, want base 36", s)
	}
	if sluice.LeaseID(0).String() != "" || sluice.ReservationID(0).String() != "" {
		t.Error("the zero id's text is not empty")
	}
	for _, s := range []string{"", "0", "not an id", "-1", "2gosa7pa2gw" /* MaxLeaseID+1 */, "000000000001"} {
		if _, err := sluice.ParseLeaseID(s); !errors.Is(err, sluice.ErrInvalidLease) {
			t.Errorf("ParseLeaseID(%q): %v, want ErrInvalidLease", s, err)
		}
		if _, err := sluice.ParseReservationID(s); !errors.Is(err, sluice.ErrUnknownReservation) {
			t.Errorf("ParseReservationID(%q): %v, want ErrUnknownReservation", s, err)
		}
	}

	type doc struct {
		Lease       sluice.LeaseID       `json:"lease,omitempty"`
		Reservation sluice.ReservationID `json:"reservation,omitempty"`
	}
	for _, d := range []doc{{}, {Lease: 1234567, Reservation: sluice.MaxLeaseID}} {
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
