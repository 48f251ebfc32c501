// Package reservation carries, from package sluice to package store, the one way to give a
// sluice.Reservation its cancellation, so that the root package need not export it.
//
// Package sluice sets WithCancel when it is initialised, before any package that imports it
// runs; package store wraps it in a typed function (store.WithCancel). Nothing else may call it.
package reservation

import "context"

// WithCancel returns r, a sluice.Reservation, with its Cancel calling f (see
// store.WithCancel). It is set by package sluice.
var WithCancel func(r any, f func(ctx context.Context) (bool, error)) any
