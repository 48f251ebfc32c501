//go:build race

package server

// codecCases is how many random messages TestRLSCodecDifferential sends each way. The race
// detector makes the codec ~25 times slower and adds nothing to a single-goroutine
// differential: make test runs the full count in its second step, without it.
const codecCases = 2000
