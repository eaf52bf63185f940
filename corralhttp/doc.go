// Package corralhttp is an HTTP read-through cache in front of one origin
// server, with corral underneath: requests for a URL that is missing or
// expiring reach the origin once across every process sharing the Redis,
// however many arrive at once, and the others are answered by that one
// response as soon as it lands. `corral serve` runs it as a sidecar; Go
// programs can mount a Handler themselves.
//
// # What is stored, and for how long
//
// The origin's headers decide, by RFC 9111 (HTTP Caching) for a shared
// cache and RFC 5861 (stale-while-revalidate, stale-if-error); the
// Cache-Control header is parsed with github.com/pquerna/cachecontrol.
// Each response becomes a corral.Entry whose TTL is its freshness lifetime
// (s-maxage, else max-age, else Expires minus Date, less the Age it came
// with) and whose stale window is the larger of stale-while-revalidate and
// stale-if-error (none with must-revalidate, proxy-revalidate or s-maxage).
// A response without explicit freshness is stored for
// Options.DefaultTTL when its status is heuristically cacheable, and not
// at all when DefaultTTL is 0.
//
// Not stored: no-store, private, Vary: *, 206 and 304, responses with
// Set-Cookie (unless Options.CacheSetCookie), 5xx (unless
// Options.CacheServerErrors), responses over Options.MaxBodyBytes, and
// responses to a request with Authorization unless they are public, have
// s-maxage or must-revalidate (RFC 9111 section 3.5; see the key, below).
// A response that may not be shared is given to its own request only
// (X-Cache: MISS): the requests that waited for it are passed to the
// origin each on its own, and the URL passes for Options.PassTTL (a pass
// marker is stored: "hit-for-pass"), so that later requests do not queue
// behind one load each. A no-cache response is shared with the requests of its
// load, then revalidated for the next.
//
// # Stale responses and revalidation
//
// Inside a response's stale window it is served stale (X-Cache: STALE)
// while one request across the fleet revalidates it in the background, and
// while the origin fails (a 5xx or no answer). RFC 5861 lets stale-if-error
// serve stale only once a revalidation failed; here both windows serve
// stale at once while one revalidation runs, which never makes a client
// wait. A load sends the origin If-None-Match and If-Modified-Since from
// the response it replaces, when that has an ETag or Last-Modified; a 304
// refreshes the stored headers and freshness and keeps the body. A
// response with validators but no stale window (or no-cache) is kept as a
// second copy for Options.RevalidateKeep past its freshness, so that it can
// still be revalidated after it expires. A client's own If-None-Match
// that matches a stored response's ETag gets 304 from the cache.
//
// # The cache key, and what the origin is sent
//
// The key holds everything the origin is sent: the method (HEAD shares
// GET's entries and is loaded with GET), the origin's scheme and host (the
// Host the origin sees is always its own), the path and query, and every
// forwarded request header with its values. Only Options.ForwardHeaders
// (default none) and Authorization are forwarded, so no other header
// (X-Forwarded-Host, Cookie, X-Original-URL...) can change a response
// that others will be served: the classic cache-poisoning vectors do not
// reach the origin. A Vary header can only name headers the origin was
// sent, which are in the key already.
//
// Authorization's value is not in the key, but whether a request carries
// one is: requests with Authorization have entries of their own, apart from
// the anonymous requests'. Among them, RFC 9111 section 3.5 decides what
// is stored and shared (public, s-maxage or must-revalidate), and a
// response that may not be shared goes to its own request only and leaves
// no pass marker. So a request with any Authorization, a made-up one
// included, can never turn caching or coalescing off for anyone else, nor
// have the anonymous requests' entries refreshed with its credentials.
// A client's Cache-Control (no-cache, max-age=0) is not followed: it would
// let any client send every request to the origin, the stampede this
// package exists to stop.
//
// # Answers
//
// Every response carries X-Cache: HIT (fresh, from the cache: Redis, the
// near cache, or while Redis cannot be used this process's memory), STALE,
// MISS (fetched from the origin for this request), COALESCED (fetched for
// another request, in this process or another, that this one waited for)
// or PASS (not through the cache: methods other than GET and HEAD, which
// are proxied as they are, and responses that may not be shared). An
// unsafe method (POST, PUT, DELETE...) that the origin answers without an
// error invalidates the stored response of its URL (RFC 9111 section 4.4;
// the variant its forwarded headers select). Errors
// the Handler makes up have a one-line text body and no X-Cache: 400 for a
// GET or HEAD with a body, 414 for a request URI over Options.MaxURLBytes,
// 502 when the origin fails (no connection, a body cut short, or a 5xx
// that the request waited for in another process; the body names no host
// or error, which are logged instead), 503 after Close, 504
// when the origin does not answer within Options.OriginTimeout. A 5xx
// that is not stored goes to the requests of its load as it is, unless a
// stale response can be served instead. Nothing partial is ever stored.
//
// # Redis faults
//
// A Redis fault is never the origin's: no request gets a 5xx for it. While
// the Cache cannot use Redis (it refuses connections, is silent past
// RedisTimeout, refuses the client's password with WRONGPASS or NOAUTH, or
// its circuit breaker is open) or Redis refuses writes (OOM under
// noeviction, READONLY on a replica, which still serves what it holds),
// corral answers from this process's memory or fails open: the origin is
// asked once per URL at a time in each process, and what it answered is
// served from memory for corral.FailSafeOptions.Throttle (a second by
// default; with the near cache, a copy is kept up to FailSafeOptions.TTL).
// A fault for which corral calls no loader, an ACL user lacking a right
// corral needs (NOPERM: corral.ErrPermission), passes each request it
// fails to the origin on its own (X-Cache: PASS), stored nowhere: every
// request, for a user without EVALSHA. Faults are matched
// with errors.Is on corral's sentinels; the origin's own failures keep
// their answers (502, 504) whatever Redis does. Each fault is logged once
// a minute at most, with the path of a request that met it: as an error
// when Redis refuses the client with an error reply (WRONGPASS, NOAUTH,
// NOPERM...), otherwise as a warning. Handler.Health says whether the
// Handler can use Redis, and if not why, in words fit for a public health
// check (a *Fault).
//
// # Metrics
//
// With Options.Registerer set: corral_http_requests_total{cache} (the
// X-Cache value, or ERROR), corral_http_request_duration_seconds{cache},
// and corral_http_origin_requests_total{code} (the origin's status code,
// or error). corralprom's Collector, as Options.Cache.Observer, adds the
// Cache's own metrics.
package corralhttp
