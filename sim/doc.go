// Package sim is sluice's traffic simulator: it runs deterministic traffic patterns against
// every algorithm on a virtual clock, through a real store (package memory, or package
// redisstore with the client clock), and measures where each algorithm strays from the
// exact sliding window ([Result]). It backs `sluice simulate` ([RunCLI]) and writes a
// self-contained HTML report. The README's "Simulating the algorithms" is the guide.
//
//	report, err := sim.Run(ctx, sim.Config{Seed: 1})
//	report.WriteTable(os.Stdout)
//	report.WriteHTML(f)
//
// Every run starts its virtual clock at [Epoch] and moves it only to the time of the next
// request; arrivals are drawn from a PCG generator seeded with Config.Seed and the
// pattern's name, so the same seed gives byte-identical JSON, CSV, table and HTML,
// whatever Config.Parallel is. [Patterns] lists the built-in patterns; a [Pattern] is
// plain data plus an arrival generator, so callers can simulate their own.
//
// [RunOverload] is the overload scenario of bench/cmd/overload on the same kind of
// virtual clock, behind `sluice simulate overload` ([RunOverloadCLI]): an upstream of
// fixed capacity, a load stepped past it, and no protection, a fixed concurrency limit
// and package overload's Limiter compared on the same arrivals, in a table and an HTML
// report drawn like the first.
package sim
