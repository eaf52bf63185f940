// Package demo replays a cache stampede, or hot keys expiring under steady
// load, against a real origin and measures, for each read-through strategy,
// what the origin and Redis went through. It
// is the engine of `corral demo`; the command in cmd/corral only parses flags
// and prints.
//
// A run has four parts, each in its own file:
//
//   - The origin (origin.go, ql.go, postgres.go, dataset.go): a real SQL
//     database seeded with generated orders, queried with an aggregate per
//     key. A meter (meter.go) counts the queries, their peak concurrency and
//     their mean duration, including the latency added to model a remote
//     database.
//   - Redis (redis.go, commands.go): an embedded in-process server by default
//     or a URL. Every app instance gets its own client, whose commands a
//     go-redis hook counts.
//   - Strategies (strategy.go and one file each): naive cache-aside, the
//     SET NX + 100 ms poll recipe, and corral. A Strategy makes one Instance
//     per app instance; an Instance answers Fetch(ctx, key).
//   - Scenarios (scenario.go, stampede.go, expiry.go): how requests reach
//     the instances. The stampede releases every goroutine of every instance
//     at once from one barrier, on cold keys. In expiry every goroutine loops
//     for a duration (request, think time) while the keys expire every TTL,
//     so the origin loads count refreshes; corral runs with a
//     stale-while-revalidate window (Config.StaleTTL).
//
// Run ties them together (run.go, trial.go) and returns a Report, which
// encodes as the JSON document of `corral demo --json` or renders as a table
// and bar charts (render.go, table.go) in lines of a given width: 80
// columns off a terminal, the terminal's width on one. The table takes the
// widest layout that fits: a row per strategy, a row per measure, or a list
// per strategy.
package demo
