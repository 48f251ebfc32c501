package store

import (
	"context"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/internal/reservation"
)

// WithCancel returns a copy of r whose [sluice.Reservation.Cancel] calls f, at most once
// with success, to give the units back: a store implementing [sluice.Limiter.Reserve]
// returns its reservations so. f reports whether the store gave the units back; an error
// lets a later Cancel try again. Copies of the result share the cancellation.
func WithCancel(r sluice.Reservation, f func(ctx context.Context) (bool, error)) sluice.Reservation {
	return reservation.WithCancel(r, f).(sluice.Reservation)
}
