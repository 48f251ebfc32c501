package store_test

import (
	"errors"
	"fmt"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/store"
)

func ExampleCheckRequest() {
	// A cost no amount of waiting could satisfy is an error, not a denial.
	err := store.CheckRequest("k", sluice.PerMinute(5), 6)
	fmt.Println(errors.Is(err, sluice.ErrCostExceedsLimit))
	// Output:
	// true
}
