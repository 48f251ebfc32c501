// Package sim is sluice's traffic simulator: it runs deterministic traffic patterns against
// every algorithm on a virtual clock, through a real store (package memory, or package
// redisstore with the client clock), and measures where each algorithm strays from the
// exact sliding window. It backs `sluice simulate` (RunCLI) and writes a self-contained
// HTML report that opens with one chart of every run's max_window_ratio, then the summary
// table, the discussion and a chart per pattern and algorithm.
//
//	report, err := sim.Run(ctx, sim.Config{Seed: 1})
//	report.WriteTable(os.Stdout)
//	report.WriteHTML(f)
//
// # Determinism
//
// Every run starts its virtual clock at Epoch (2026-01-01T00:00:00Z, a boundary of every
// window that divides a day) and moves it only to the time of the next request, so a
// decision never depends on the host. A pattern's arrivals are drawn from a PCG generator
// seeded with Config.Seed and the pattern's name; the same seed gives byte-identical JSON,
// CSV, table and HTML, whatever Config.Parallel is.
//
// # What is measured
//
// For each (pattern, algorithm) pair, one Result: requests, admitted, denied; the largest
// number of units admitted for one key in any rolling window (t-Period, t] over Rate
// (max_window_ratio: 1 is exact, the fixed window reaches 2 at boundaries); false allows and
// false denies against the exact sliding log, judged request by request over the run's own
// admitted history; for the window counters the mean error of their count of the window;
// whether every Retry-After was honest, tested by looking (a cost-0 AllowN, which spends
// nothing) exactly at the instant it named — which must allow — and 1µs earlier — which must
// deny — whenever nothing else was admitted on the key meanwhile; and the bytes of algorithm
// state per key.
//
// Separately, for each pattern, an Estimate treats the sliding window counter as a rate
// estimator on the raw traffic, as Cloudflare measured theirs: every request counted, each
// judged wrong when the estimate and the exact count of the last Period fall on opposite
// sides of the threshold.
//
// # Beside Cloudflare's published accuracy
//
// Cloudflare published the accuracy of its sliding window counter on "400 million requests
// from 270,000 distinct sources": 0.003% of requests wrongly allowed or rate limited, an
// average difference of 6% between the real and the approximate rate, 3 sources let
// through although slightly (less than 15%) above the threshold, none limited below it
// (see the Cloudflare constants). The cloudflare pattern carries a Population modelled on
// that sample (CloudflarePopulation documents each assumption and the quote it rests on):
// 270,000 sources sending Poisson traffic at Pareto-distributed rates, nearly all far
// below a threshold of 50 per minute. Run measures the estimator on the whole population,
// source by source (PopulationAccuracy), and the report sets its figures beside
// Cloudflare's.
//
// A crowd's wrong-decision rate is governed by how much of its traffic comes from sources
// near the threshold: only there can an estimate a few percent off cross it. So besides
// the population's own figures, the report gives the estimator's error rate among
// near-threshold requests (sources within ±50% of the threshold), which is a property of
// the estimator, and a sensitivity table of the wrong-decision rate and the average
// difference as the share of near-threshold traffic varies, with the share at which
// Cloudflare's figures would be reached.
//
// # Patterns
//
// Patterns lists the built-in ones: steady traffic at 0.5×, 1× and 2× the limit; Poisson;
// on/off bursts; bursts synchronised to window boundaries; CDN edge batching; many keys of
// Zipf popularity; clients that honour Retry-After; and a sample of the Cloudflare-like
// population. A Pattern is plain data plus an arrival generator, so callers can simulate
// their own.
package sim
