package corralhttp

import (
	"context"
	"errors"
	"log/slog"
	"net/http"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/corralhq/corral"
	"github.com/corralhq/corral/internal/errprefix"
)

// Redis faults are not the origin's. While the Cache cannot use Redis
// (refused, silent, the client's password refused, the breaker open) it
// answers from memory or fails open, calling the load itself; while Redis
// refuses writes (OOM, READONLY) it serves what Redis holds, and answers
// misses the same way. Those requests are answered as any other. A fault
// that Fetch returns instead of loading (a right the ACL user lacks:
// ErrPermission) passes the request to the origin (pass.go): no caching,
// one origin exchange for the request, never a 5xx that blames the origin.
// Either way the fault is logged once per faultLogEvery per Reason, with a
// request's path, not once per request.

// faultLogEvery is how often, at most, one Redis fault is logged.
const faultLogEvery = time.Minute

// A Fault says why a Handler cannot use Redis as it needs, and what it does
// meanwhile. Handler.Health returns one. Reason and Serving name at most
// the code of Redis's reply (WRONGPASS, NOPERM, OOM...), never its text nor
// an address, so they may be shown to anyone (a public health check); Err,
// in the log, has the rest.
type Fault struct {
	// Reason says what is wrong, in a few lowercase words: "redis refuses
	// connections", "redis denies a right corral needs (NOPERM)"...
	Reason string
	// Serving says what the Handler does meanwhile: "serving from memory
	// and the origin", "passing the requests that need it to the origin,
	// each on its own"...
	Serving string
	// Refused is set when Redis refuses this client with an error reply
	// (its credentials, a right, or another reply's code): logged as an
	// error, the others as warnings.
	Refused bool
	// Err is the Cache's error (corral.Cache.Health's, or the one a request
	// met), wrapping corral's sentinel and Redis's own error.
	Err error
}

// Error says "corralhttp: ", the Reason, and Err without its "corral: ".
func (f *Fault) Error() string {
	return "corralhttp: " + f.Reason + ": " + errprefix.Trim(corralPrefix, f.Err).Error()
}

// corralPrefix begins the text of corral's errors; a Fault's text and the
// log's "err" attributes go without it (errAttr), their messages say whose
// they are.
const corralPrefix = "corral: "

// errAttr is a log record's "err" attribute: err, without corralPrefix.
func errAttr(err error) slog.Attr { return errprefix.Attr(corralPrefix, err) }

// Unwrap returns Err, so that errors.Is sees corral's sentinels.
func (f *Fault) Unwrap() error { return f.Err }

// What a Handler does during each kind of fault.
const (
	servingFailOpen = "serving from memory and the origin"
	servingPass     = "passing the requests that need it to the origin, each on its own"
	servingHeld     = "serving what redis holds; misses from memory and the origin"
)

// faultOf returns the Fault err is, when it is a Redis fault (matched on
// corral's sentinels), or nil.
func faultOf(err error) *Fault {
	code := replyCode(err)
	switch {
	case err == nil:
		return nil
	case errors.Is(err, corral.ErrPermission):
		if code == "ERR" {
			code = "" // a right denied inside a script: no code of its own
		}
		return &Fault{Reason: "redis denies a right corral needs" + inParens(code), Serving: servingPass, Refused: true, Err: err}
	case errors.Is(err, corral.ErrWriteRefused):
		return &Fault{Reason: "redis refuses writes" + inParens(writeRefusal(err)), Serving: servingHeld, Err: err}
	case !errors.Is(err, corral.ErrCircuitOpen) && !errors.Is(err, corral.ErrRedisTimeout):
		return nil
	case code != "":
		return &Fault{Reason: "redis refuses the cache's calls (" + code + ")", Serving: servingFailOpen, Refused: true, Err: err}
	case errors.Is(err, corral.ErrRedisTimeout):
		return &Fault{Reason: "redis does not answer", Serving: servingFailOpen, Err: err}
	case errors.Is(err, syscall.ECONNREFUSED):
		return &Fault{Reason: "redis refuses connections", Serving: servingFailOpen, Err: err}
	}
	return &Fault{Reason: "redis cannot be used", Serving: servingFailOpen, Err: err}
}

// replyCode returns the code of the Redis error reply err wraps (its first
// word: WRONGPASS, NOPERM, OOM...), or "".
func replyCode(err error) string {
	var reply redis.Error
	if !errors.As(err, &reply) {
		return ""
	}
	code, _, _ := strings.Cut(reply.Error(), " ")
	return code
}

// writeRefusal returns why Redis refuses writes, for an error wrapping
// corral.ErrWriteRefused: OOM or READONLY, or "" when err does not say.
// corral names the reason in the error's text only (Cache.Health's has no
// reply in it), so the text's words are looked at, for these two codes
// alone; nothing else of it is shown.
func writeRefusal(err error) string {
	if code := replyCode(err); code != "" {
		return code
	}
	for w := range strings.FieldsFuncSeq(err.Error(), func(r rune) bool { return r == ' ' || r == '(' || r == ')' || r == ':' }) {
		if w == "OOM" || w == "READONLY" {
			return w
		}
	}
	return ""
}

func inParens(code string) string {
	if code == "" {
		return ""
	}
	return " (" + code + ")"
}

// Health returns nil while the Handler can use Redis as it needs, and
// otherwise a *Fault saying why and what it does meanwhile, wrapping
// corral.Cache.Health's error (match it with errors.Is: ErrCircuitOpen,
// ErrPermission, ErrWriteRefused). Like Cache.Health it asks nothing of
// Redis: it says what the Handler's own calls met, recently (a right
// denied, writes refused: in the last 10 s) or now (the breaker open). A
// Handler still serves while it returns an error.
func (h *Handler) Health() error {
	if f := h.fault(); f != nil {
		return f
	}
	return nil
}

// fault is Health's Fault, or nil.
func (h *Handler) fault() *Fault {
	err := h.cache.Health()
	if err == nil {
		return nil
	}
	if f := faultOf(err); f != nil {
		return f
	}
	return &Fault{Reason: "redis cannot be used", Serving: servingFailOpen, Err: err}
}

// faultLog logs Redis faults, each Reason at most once per faultLogEvery.
type faultLog struct {
	log  *slog.Logger
	now  func() time.Time // time.Now, or a test's clock
	mu   sync.Mutex
	last map[string]time.Time // guarded by mu: when each Reason was last logged
}

func newFaultLog(log *slog.Logger) *faultLog { return &faultLog{log: log, now: time.Now} }

// maxFaultReasons bounds faultLog.last: Reasons hold a reply's code, which
// is Redis's to choose.
const maxFaultReasons = 64

// seen logs f, met by a request for path, unless its Reason was logged in
// the last faultLogEvery: as an error when Redis refuses the client, else
// as a warning.
func (l *faultLog) seen(path string, f *Fault) {
	now := l.now()
	l.mu.Lock()
	if at, ok := l.last[f.Reason]; ok && now.Sub(at) < faultLogEvery {
		l.mu.Unlock()
		return
	}
	if l.last == nil || len(l.last) >= maxFaultReasons {
		l.last = make(map[string]time.Time)
	}
	l.last[f.Reason] = now
	l.mu.Unlock()
	level := slog.LevelWarn
	if f.Refused {
		level = slog.LevelError
	}
	l.log.Log(context.Background(), level, "corral: Redis fault, not the origin's: "+f.Reason+"; "+f.Serving+" (logged once a minute at most)",
		"path", path, errAttr(f.Err))
}

// failedOpen logs the fault behind a request for path that the Cache
// answered without Redis (from memory, or failing open), if the Cache says
// there is one.
func (h *Handler) failedOpen(path string) {
	if f := h.fault(); f != nil {
		h.faults.seen(path, f)
	}
}

// passFault answers r, whose fetch failed with the Redis fault f, from the
// origin: passed, as a request whose response may not be shared is.
func (h *Handler) passFault(w http.ResponseWriter, r *http.Request, f *Fault) string {
	h.faults.seen(r.URL.Path, f)
	h.pass(w, r)
	return Pass
}
