package quota

import (
	"context"
	"time"
)

// Report is one client's report on one bucket.
type Report struct {
	// Key names the bucket in the store (config.QuotaMatch.Key: a digest).
	Key string
	// Client names the reporting client; unique per proxy stream.
	Client string
	// Rate is the bucket's global limit per period, in [0, MaxRate].
	Rate int64
	// Weight is the client's demand, Weight(Demand(...), Rate).
	Weight int64
	// TTL is how long the share answered holds without another report.
	TTL time.Duration
}

// Assignment is the answer to one Report.
type Assignment struct {
	// Rate is the reporter's share, requests per period; -1 when the bucket already
	// has MaxClients other clients and the reporter gets nothing.
	Rate int64
	// Clients is the number of live clients of the bucket, the reporter included
	// (unless refused).
	Clients int64
	// Assigned is the sum of the live shares of the bucket, the reporter's included;
	// never more than the report's Rate.
	Assigned int64
}

// Store keeps the clients of every bucket and rebalances a bucket at each report.
type Store interface {
	// Rebalance answers reps in order, out[i] for reps[i] (len(out) ≥ len(reps)). On
	// error, no answer in out is meaningful, though some reports may have been applied.
	Rebalance(ctx context.Context, reps []Report, out []Assignment) error
}

// expiredPerCall bounds how many expired clients one rebalance removes; those left stay
// counted, shares too, until a later report removes them (the safe side of the bound).
const expiredPerCall = 64
