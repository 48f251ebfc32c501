package sluice

import "time"

// WaitWithTimer is Wait with its timer source, for the tests of package sluice_test.
var WaitWithTimer = wait

// ZoneLocation is z's location, for the tests of package sluice_test.
func ZoneLocation(z Zone) *time.Location { return z.location() }
