package corralhttp

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"unicode"

	"github.com/corralhq/corral"
	"github.com/corralhq/corral/internal/errprefix"
)

// httpPrefix begins the text of corralhttp's errors.
const httpPrefix = "corralhttp: "

// Purging: invalidating stored responses before their time, by the tags
// their entries carry (tags.go). A hard purge (corral's InvalidateTags)
// drops them: once it returns, no request that asks the origin afterwards
// is served one of them, in this process at once and in the others within
// corral's bound. A soft purge (ExpireTags) makes them stale as if their
// freshness had run out: a response with a stale-while-revalidate window
// is served stale (X-Cache: STALE) while one request across the fleet
// revalidates it, conditionally when it has validators; one without is
// gone, as by a hard purge (its second copy, kept for revalidation, stays
// to be revalidated). Purging everything is corral's Clear: hard, whatever
// its size, for every sidecar sharing the Prefix.

// A Purge says what to purge (Handler.Purge, Purge.Apply).
type Purge struct {
	// Keys are surrogate keys: every response whose Surrogate-Key or
	// Cache-Tag named one is purged. A key holds no space (an origin's
	// members are separated by them).
	Keys []string

	// URLs are paths, with or without a query, as clients ask the sidecar
	// for them: every stored thing of each is purged (see URLTag).
	URLs []string

	// All purges everything the Cache holds under its Prefix, for every
	// Handler sharing it: its responses, and any other entry there. Alone:
	// not with Keys, URLs or Soft.
	All bool

	// Soft makes what is purged stale rather than gone: see above.
	Soft bool
}

// ErrInvalidPurge is wrapped by the error of a Purge that says nothing,
// or something that cannot be done: nothing is purged then.
var ErrInvalidPurge = errors.New("corralhttp: invalid purge")

// Tags returns the tags p purges: its Keys and the URLTag of each of its
// URLs, sorted, distinct; nil for All. Errors: ErrInvalidPurge (wrapped),
// for nothing to purge, an empty key or one with a space or a control
// character, All with anything else, and ErrInvalidURL's (wrapped too)
// for a URL that is not a path.
func (p Purge) Tags() ([]string, error) {
	switch {
	case p.All && (len(p.Keys) > 0 || len(p.URLs) > 0):
		return nil, fmt.Errorf("%w: All purges everything: give it without Keys or URLs", ErrInvalidPurge)
	case p.All && p.Soft:
		return nil, fmt.Errorf("%w: All is hard only: a soft purge names Keys or URLs", ErrInvalidPurge)
	case p.All:
		return nil, nil
	case len(p.Keys) == 0 && len(p.URLs) == 0:
		return nil, fmt.Errorf("%w: nothing to purge: give Keys, URLs or All", ErrInvalidPurge)
	}
	var tags []string
	for _, k := range p.Keys {
		switch {
		case k == "":
			return nil, fmt.Errorf("%w: an empty key", ErrInvalidPurge)
		case strings.ContainsFunc(k, unicode.IsSpace):
			return nil, fmt.Errorf("%w: key %q holds a space: give each key on its own", ErrInvalidPurge, k)
		case strings.ContainsFunc(k, unicode.IsControl):
			return nil, fmt.Errorf("%w: key %q holds a control character", ErrInvalidPurge, k)
		}
		tags = append(tags, k)
	}
	for _, u := range p.URLs {
		t, err := URLTag(u)
		if err != nil {
			return nil, errprefix.Errorf(httpPrefix, "%w: %w", ErrInvalidPurge, err)
		}
		tags = append(tags, t)
	}
	slices.Sort(tags)
	return slices.Compact(tags), nil
}

// Apply purges what p says from c: a Cache holding a Handler's entries
// (its Redis, and Options.Cache's Prefix), as Handler.Purge does with the
// Handler's own, or as `corral purge` does with one of its own. Errors:
// ErrInvalidPurge (wrapped), before anything is purged; otherwise
// corral's, of InvalidateTags, ExpireTags or Clear: among them, one that
// says the purge could not reach Redis and was queued, to be applied by
// c once Redis answers (Queued reports it).
func (p Purge) Apply(ctx context.Context, c *corral.Cache) error {
	tags, err := p.Tags()
	switch {
	case err != nil:
		return err
	case p.All:
		return c.Clear(ctx)
	case p.Soft:
		return c.ExpireTags(ctx, tags...)
	}
	return c.InvalidateTags(ctx, tags...)
}

// Purge purges what p says from the Handler's Cache, and so from every
// Handler sharing its Redis and Prefix: see Purge.Apply.
func (h *Handler) Purge(ctx context.Context, p Purge) error {
	return p.Apply(ctx, h.cache)
}

// Queued reports whether err, a purge's (Handler.Purge, Purge.Apply),
// says that Redis could not take it (down, silent, refusing writes) and
// that the Cache queued it: it applies it once Redis answers, and until
// then serves nothing it purged; other processes hear of it once it
// lands (corral.ErrQueued).
func Queued(err error) bool { return errors.Is(err, corral.ErrQueued) }
