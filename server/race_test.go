//go:build race

package server

// codecCases is how many random messages TestRLSCodecDifferential sends each way. The race
// detector makes the codec ~25 times slower and adds nothing to a single-goroutine
// differential: make test, which builds without it, runs the full count.
const codecCases = 2000
