package sluice

// WaitWithTimer is Wait with its timer source, for the tests of package sluice_test.
var WaitWithTimer = wait
