//go:build race

package server

// raceEnabled: the race detector allocates on synchronisation, and sync.Pool drops items
// at random under it, so allocation counts mean nothing under it.
const raceEnabled = true
