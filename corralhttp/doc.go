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
// cache, RFC 5861 (stale-while-revalidate, stale-if-error) and RFC 9213
// (targeted cache control), parsed strictly: Cache-Control by the RFC 9110
// list grammar (cachecontrol.go), HTTP-dates by their three formats only
// (httpdate.go; not net/http's lenient ParseTime), CDN-Cache-Control as
// an RFC 8941 dictionary (github.com/dunglas/httpsfv). The first valid,
// non-empty targeted field among Options.TargetedCacheControl and
// CDN-Cache-Control replaces Cache-Control and Expires; an invalid one is
// ignored whole. Each response becomes a corral.Entry whose TTL is its
// freshness lifetime (s-maxage, else max-age, else Expires minus Date)
// less its age (the Age it came with, the first member of an Age list,
// and the time since it was requested) and whose
// stale window is its stale-while-revalidate (none with must-revalidate,
// proxy-revalidate or s-maxage). A response whose freshness the RFCs call
// invalid is stale: an Expires that does not parse or is given twice, a
// max-age or s-maxage that is not a delta-seconds or is given twice; it
// goes to the requests of its load and is not stored. A Date that does not
// parse counts as the time received. A response without explicit
// freshness, of a heuristically cacheable status (RFC 9110 section 15.1)
// or public, gets heuristic freshness (RFC 9111 section 4.2.2) when it has
// a valid Last-Modified: a tenth of the time from that to its Date, at
// most Options.HeuristicMaxTTL (24h; Options.DisableHeuristicFreshness
// turns it off); without one, Options.DefaultTTL; when that is 0, it is
// not stored.
//
// Not stored: no-store, private (qualified or not), Vary: * (or a Vary
// naming a header never forwarded: hop-by-hop, conditional, Range), 206 and
// 304, responses with Set-Cookie (unless Options.CacheSetCookie), 5xx
// (unless Options.CacheServerErrors), responses over Options.MaxBodyBytes,
// responses to a request with Authorization unless they are public, have
// s-maxage or must-revalidate (RFC 9111 section 3.5; see the key, below),
// and whatever a load fetches for a request saying Cache-Control: no-store
// (section 5.2.1.5). A response that may not be shared is given to its own
// request only (X-Cache: MISS): the requests that waited for it are passed
// to the origin each on its own, and the URL passes for Options.PassTTL (a
// pass marker is stored: "hit-for-pass"), so that later requests do not
// queue behind one load each. A malformed Cache-Control (one that does not
// parse, where a private may hide) counts as such a response. A no-cache
// response is shared with the requests of its load, then revalidated for
// the next.
//
// # Stale responses and revalidation
//
// The two RFC 5861 windows are kept apart. Inside its stale-while-revalidate
// window a response is served stale (X-Cache: STALE) while one request
// across the fleet revalidates it in the background: that window is the
// corral entry's stale window. Past it, the entry is gone and the next
// request's load asks the origin; only when that fails (no answer within
// Options.OriginTimeout, a broken connection, or 500, 502, 503, 504) is
// the response served stale, inside its stale-if-error window, to the
// requests of that load, and never stored, so that the next request asks
// the origin again. While the origin answers, nothing is served stale past
// the stale-while-revalidate window. For this the response is kept as a
// second copy, under a key of its own, for its freshness plus its
// stale-if-error window when that is the longer.
//
// A load sends the origin If-None-Match and If-Modified-Since from the
// response it replaces, when that has an ETag or Last-Modified; a 304
// refreshes the stored headers and freshness and keeps the body, but only
// when it is about that response (RFC 9111 section 4.3.4: its ETag
// matches, or without one its Last-Modified); a 304 naming another ETag
// refreshes nothing, and the response is fetched whole. A response with
// validators but no stale-while-revalidate window (or no-cache) is kept as
// the second copy for Options.RevalidateKeep past its freshness, so that
// it can still be revalidated after it expires.
//
// A client's preconditions and ranges are answered from a stored 200
// (respond.go; RFC 9110 sections 13 and 14): If-None-Match (a list, commas
// inside quotes kept) matching its ETag, or without If-None-Match an
// If-Modified-Since (one HTTP-date, parsed strictly) no earlier than its
// Last-Modified (or Date), gets 304; a GET with one byte range gets 206
// and Content-Range, or 416 when the range is past the end; several
// ranges, a Range that does not parse, or an If-Range that does not match
// (a strong ETag, or a Last-Modified at least 60 s before the Date), the
// whole response. Such a response says Accept-Ranges: bytes.
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
// reach the origin, unless the origin names them in a Vary.
//
// Vary (RFC 9111 section 4.1; vary.go): a response is never served to a
// request whose Vary'd headers differ from those it was fetched with. The
// URL's key is loaded with the forwarded headers only, so a response that
// varies on another header (Foo) is the variant for requests without Foo,
// and is stored as such. A request with Foo then goes on to its variant's
// key, which holds Foo's value, normalised (lines combined, whitespace
// around commas dropped; names compared case-insensitively), and whose
// loads and revalidations send Foo to the origin. Each distinct value
// costs its own origin request and entry: a Vary: Cookie makes each
// cookie a variant, the origin then sent it. A response varying on Foo
// that is shared but not stored (no-cache, stale) leaves a vary marker
// for PassTTL, sending every request to its variant. The variants' keys
// hold an identifier of the URL's response, so an invalidation, which
// deletes that response, leaves every variant behind, unreachable.
//
// Authorization's value is not in the key, but whether a request carries
// one is: requests with Authorization have entries of their own, apart from
// the anonymous requests'. Among them, RFC 9111 section 3.5 decides what
// is stored and shared (public, s-maxage or must-revalidate; never a
// response that varies on Authorization), and a response that may not be
// shared goes to its own request only and leaves no pass marker. So a
// request with any Authorization, a made-up one included, can never turn
// caching or coalescing off for anyone else, nor have the anonymous
// requests' entries refreshed with its credentials. A client's
// Cache-Control is not followed (no-cache, max-age=0 would let any client
// send every request to the origin, the stampede this package exists to
// stop), but for no-store, which only keeps what the client's own load
// fetches out of Redis.
//
// # Answers
//
// Every response the cache serves carries X-Cache: HIT (fresh, from the
// cache: Redis, the near cache, or while Redis cannot be used this
// process's memory), STALE (inside its stale-while-revalidate window, or
// while the origin fails), MISS (fetched from the origin for this
// request), COALESCED (fetched for another request, in this process or
// another, that this one waited for) or PASS (not through the cache:
// methods other than GET and HEAD, which are proxied as they are, and
// responses that may not be shared). An unsafe method (POST, PUT,
// DELETE...) that the origin answers without an error invalidates the
// stored responses of its URL (RFC 9111 section 4.4: those its forwarded
// headers select, and their Vary variants).
//
// It carries the same in RFC 9211's terms, as a Cache-Status member naming
// the cache (Options.CacheName, "corral") appended to the origin's (the
// list runs from the origin to the client; status.go): "corral; hit"
// (HIT), "corral; hit; detail=stale" (STALE, while it is revalidated),
// "corral; fwd=stale; fwd-status=503" or "...; detail=origin-error" (STALE
// because the origin failed), "corral; fwd=uri-miss; stored" (MISS;
// fwd=stale when an expired response was revalidated or replaced, with
// fwd-status=304 when a 304 refreshed it; stored when it was),
// "corral; fwd=uri-miss; collapsed" (COALESCED), "corral; fwd=bypass"
// (PASS) or "corral; fwd=method" (PASS, another method). Via gets
// "1.1 corral" (the protocol received, and the cache's name) appended, on
// each response and on each request sent to the origin (to the client's
// own Via when that is a forwarded header). A 1xx the origin
// sends (103 Early Hints) reaches the client whose own load or pass asked
// for it (informational.go). Options.AccessLog, when set, gets one record
// per request (accesslog.go), never with a header or the query.
//
// Errors the Handler makes up have a one-line text body and no X-Cache,
// Cache-Status or Via (RFC 9211 section 2: not on a response it
// generates): 400 for a GET or HEAD with a body, 414 for a request URI
// over Options.MaxURLBytes, 502 when the origin fails (no connection, a
// body cut short, or a 5xx that the request waited for in another process;
// the body names no host or error, which are logged instead), 503 after
// Close, 504 when the origin does not answer within Options.OriginTimeout.
// A 5xx that is not stored goes to the requests of its load as it is,
// unless a stale response can be served instead, but only to those it
// would be served to were it stored: not when it is private, no-store,
// has Set-Cookie or Vary: *, or was fetched with Authorization and is not
// public; and not to a request that has a header its Vary names that the
// load did not send. Those requests are passed to the origin, each alone. Nothing partial is ever
// stored. A response with a Transfer-Encoding Go's client refuses
// (anything but chunked alone) is fetched again over a connection of its
// own and decoded (gzip, deflate; codings.go); one it cannot decode gets
// 502, the log naming the coding.
//
// # Tags and purging
//
// The members of an origin response's Surrogate-Key (space-separated, as
// Fastly reads it) and Cache-Tag (comma-separated, as Cloudflare does;
// spaces separate too) are its surrogate keys: the stored response's tags
// (corral.Entry.Tags), distinct, empty members dropped. Neither header
// reaches a client, from the cache or passed. Every stored thing of a URL
// carries the URL's tags as well (URLTag): its responses under every key
// (each forwarded header's values, with or without Authorization), its
// Vary variants, their second copies, and its pass and vary markers.
// Handler.Purge drops by them (a Purge; Purge.Apply does it on any Cache
// sharing the Redis and Prefix, as `corral purge` does): Keys, the
// responses that named one; URLs, every stored thing of a path, each of
// its queries included, or of one URL with its query; All, everything
// under the Prefix (corral.Cache.Clear). A hard purge (corral's
// InvalidateTags) drops them, for every Handler sharing the Prefix: the
// next request asks the origin, and not conditionally. Purge.Soft makes them
// stale instead (ExpireTags): served stale (X-Cache: STALE) inside their
// stale-while-revalidate window while one request revalidates them;
// without a window, gone. A purge that cannot reach Redis is queued by
// corral, and applied once Redis answers (Queued).
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
