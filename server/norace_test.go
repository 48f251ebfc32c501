//go:build !race

package server

// codecCases is how many random messages TestRLSCodecDifferential sends each way.
const codecCases = 20000
