package sluice

import (
	"fmt"
	"strconv"
)

// LeaseID identifies the lease an allowed request took under a Concurrency limit
// (Decision.Lease); give it to Limiter.Release when the request is done. The zero LeaseID
// is no lease. Stores give ids in [1, 2^53-1]. Its text (String, MarshalText) is the id
// in base 36, at most 11 characters, and the zero LeaseID's is "".
type LeaseID uint64

// ReservationID identifies the reservation an allowed request with a SettleTTL made
// (Decision.Reservation); give it to Limiter.Settle with the actual cost. The zero
// ReservationID is no reservation. Ids and their text are as LeaseID's.
type ReservationID uint64

// maxID bounds lease and reservation ids (store.MaxLeaseID): they are below 2^53, so
// that Redis's Lua holds them exactly.
const maxID = 1<<53 - 1

// String returns the id in base 36, "" for the zero LeaseID.
func (id LeaseID) String() string { return string(appendID(nil, uint64(id))) }

// MarshalText implements encoding.TextMarshaler, as String.
func (id LeaseID) MarshalText() ([]byte, error) { return appendID(nil, uint64(id)), nil }

// UnmarshalText implements encoding.TextUnmarshaler: "" is the zero LeaseID; anything else
// is read as String writes it, and text that no store gives is an error wrapping
// [ErrInvalidLease].
func (id *LeaseID) UnmarshalText(b []byte) error {
	v, err := unmarshalID(b, ErrInvalidLease, "lease")
	*id = LeaseID(v)
	return err
}

// String returns the id in base 36, "" for the zero ReservationID.
func (id ReservationID) String() string { return string(appendID(nil, uint64(id))) }

// MarshalText implements encoding.TextMarshaler, as String.
func (id ReservationID) MarshalText() ([]byte, error) { return appendID(nil, uint64(id)), nil }

// UnmarshalText implements encoding.TextUnmarshaler as LeaseID's does, with errors
// wrapping [ErrUnknownReservation].
func (id *ReservationID) UnmarshalText(b []byte) error {
	v, err := unmarshalID(b, ErrUnknownReservation, "reservation")
	*id = ReservationID(v)
	return err
}

func appendID(b []byte, v uint64) []byte {
	if v == 0 {
		return b
	}
	return strconv.AppendUint(b, v, 36)
}

// unmarshalID reads an id in base 36, "" as 0; the error wraps sentinel and names what.
func unmarshalID(b []byte, sentinel error, what string) (uint64, error) {
	if len(b) == 0 {
		return 0, nil
	}
	v, err := strconv.ParseUint(string(b), 36, 64)
	if err != nil || v == 0 || v > maxID || len(b) > 11 {
		return 0, fmt.Errorf("%w: %.40q is not a %s id", sentinel, b, what)
	}
	return v, nil
}
