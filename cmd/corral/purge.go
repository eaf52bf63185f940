package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"strings"
	"time"

	core "github.com/corralhq/corral"
	"github.com/corralhq/corral/corralhttp"
	"github.com/corralhq/corral/internal/epochs"
	"github.com/corralhq/corral/internal/errprefix"
	"github.com/corralhq/corral/internal/redisurl"
	"github.com/redis/go-redis/v9"
	"github.com/spf13/cobra"
)

// exitPurgeFailed is corral purge's exit status when Redis did not take
// all of the purge (a usage error is exitUsage).
const exitPurgeFailed = 1

// purgeFlags are corral purge's flags.
type purgeFlags struct {
	redis, prefix    string
	keys, tags, urls []string
	all, soft        bool
	timeout          time.Duration
}

// newPurgeCmd returns `corral purge`.
func newPurgeCmd() *cobra.Command {
	o := &purgeFlags{}
	cmd := &cobra.Command{
		Use:   "purge",
		Short: "Invalidate cached entries: by key, by tag (a sidecar's surrogate key), by sidecar URL, or all",
		Long: `purge invalidates what Caches sharing --redis and --prefix hold, for scripts
(a deploy, a content update), as their own InvalidateTags, Delete or Clear
would:

  --key K    the entry of the cache key K (Delete; with --soft, Expire)
  --tag T    every entry tagged T (InvalidateTags; with --soft, ExpireTags):
             for corral serve, a surrogate key its origin named in a
             Surrogate-Key or Cache-Tag header
  --url U    every response corral serve stored for the URL U: a path, as
             clients ask the sidecar for it; without a query, every query
             of the path; with one, that URL alone (corralhttp.URLTag)
  --all      everything under --prefix (Clear): hard, alone; then deletes
             the cleared entries from Redis (a SCAN of every master; a
             Cache of the prefix finishes it if corral purge cannot)

--key, --tag and --url are repeatable, and may be given together. A hard
purge (the default) drops the entries: once corral purge has exited 0, no
load that starts afterwards is answered with them, in every Cache and
corral serve of the prefix within 100 ms (their coherence bound: the
sidecar's requests in those 100 ms may still be HITs). --soft makes them
stale as if their TTL had passed: one inside its stale window
(stale-while-revalidate) is served stale while one refresh runs; one
without a window is gone, as in a hard purge. --prefix defaults to corral,
corral serve's and the library's default: give the sidecars' --prefix if
they have one.

Every flag can also be set by an environment variable: CORRAL_PURGE_ and
the flag's name in capitals, dashes as underscores (CORRAL_PURGE_REDIS,
CORRAL_PURGE_PREFIX; a repeatable flag's variable gives it once). A flag
on the command line wins over its variable; a CORRAL_PURGE_ variable that
is no flag's is a usage error. Give a URL with a password through
CORRAL_PURGE_REDIS rather than the command line, which other users of the
machine can read.

Exit status: 0 once everything asked is purged, 1 when Redis did not take
all of it (the error says what; what Redis could not take at once is tried
again as corral purge exits, for up to 2s, and is lost if Redis still does
not answer), 2 for a usage error (nothing purged). It prints what it purged
on stdout. The password is never printed.`,
		Example: `  corral purge --redis redis://127.0.0.1:6379 --tag product-42
  corral purge --redis redis://127.0.0.1:6379 --url /products/42 --url '/search?q=shoes' --soft
  CORRAL_PURGE_REDIS='rediss://app:secret@redis.internal:6380' corral purge --prefix shop --all`,
		Args: func(cmd *cobra.Command, args []string) error {
			if len(args) > 0 {
				return usageError(cmd, errorf("unexpected argument %q", args[0]))
			}
			return nil
		},
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := applyEnvOf(cmd.Flags(), os.Environ(), "CORRAL_PURGE_", "purge"); err != nil {
				return usageError(cmd, err)
			}
			return runPurge(cmd, *o)
		},
	}
	cmd.SetFlagErrorFunc(usageError)
	f := cmd.Flags()
	f.StringVar(&o.redis, "redis", "", "Redis URL: redis:// or rediss://, with user and password if needed; a Cluster as redis://h1:p1?addr=h2:p2 or redis://h1:p1,h2:p2 (required)")
	f.StringVar(&o.prefix, "prefix", core.DefaultPrefix, "the Prefix of the Caches (corral.Options.Prefix; corral serve's --prefix)")
	f.StringArrayVar(&o.keys, "key", nil, "a cache key to purge (repeatable)")
	f.StringArrayVar(&o.tags, "tag", nil, "a tag, or a sidecar's surrogate key, to purge (repeatable)")
	f.StringArrayVar(&o.urls, "url", nil, "a sidecar URL to purge: a path, with or without a query (repeatable)")
	f.BoolVar(&o.all, "all", false, "purge everything under --prefix (hard only, alone)")
	f.BoolVar(&o.soft, "soft", false, "make what is purged stale rather than gone")
	f.DurationVar(&o.timeout, "timeout", 10*time.Second, "how long the whole purge may take")
	return cmd
}

// check validates o, returning the tags to purge (--tag's, then --url's)
// or a usage error.
func (o purgeFlags) check() ([]string, error) {
	switch {
	case o.redis == "":
		return nil, errors.New("--redis is required (or CORRAL_PURGE_REDIS)")
	case o.timeout <= 0:
		return nil, errorf("--timeout must be positive (got %v)", o.timeout)
	case o.all && (len(o.keys) > 0 || len(o.tags) > 0 || len(o.urls) > 0):
		return nil, errors.New("--all purges everything: give it without --key, --tag or --url")
	case o.all && o.soft:
		return nil, errors.New("--all is hard only: --soft needs --key, --tag or --url")
	case !o.all && len(o.keys) == 0 && len(o.tags) == 0 && len(o.urls) == 0:
		return nil, errors.New("nothing to purge: give --key, --tag, --url or --all")
	}
	for _, f := range []struct {
		name   string
		values []string
	}{{"--key", o.keys}, {"--tag", o.tags}, {"--url", o.urls}} {
		for _, v := range f.values {
			switch {
			case v == "":
				return nil, errorf("%s must not be empty", f.name)
			case strings.Contains(v, "\x00"):
				return nil, errorf("%s must not hold a NUL byte", f.name)
			}
		}
	}
	tags := o.tags
	for _, u := range o.urls {
		t, err := corralhttp.URLTag(u)
		if err != nil {
			return nil, errorf("--url: %w", errprefix.Trim("corralhttp: ", err))
		}
		tags = append(tags, t)
	}
	return tags, nil
}

// runPurge is corral purge's RunE.
func runPurge(cmd *cobra.Command, o purgeFlags) error {
	tags, err := o.check()
	if err != nil {
		return usageError(cmd, err)
	}
	ctx, cancel := context.WithTimeout(cmd.Context(), o.timeout)
	defer cancel()
	uo, err := redisurl.Parse(ctx, o.redis)
	if err != nil {
		return usageError(cmd, errorf("--redis: %w", err))
	}
	rdb := redis.NewUniversalClient(&uo)
	defer rdb.Close()
	// Its own failures are the error; the library's warnings about the
	// Redis (its eviction policy...) are corral check's to give.
	quiet := slog.New(slog.NewTextHandler(io.Discard, nil))
	cache, err := core.New(rdb, &core.Options{Prefix: o.prefix, Logger: quiet})
	if err != nil {
		return usageError(cmd, err)
	}
	errs := o.apply(ctx, cache, tags)
	cache.Close() // applies, within its bound, what Redis could not take at once
	if err := unapplied(errs, cache.Stats().InvalidationsDropped > 0); err != nil {
		return &exitError{exitPurgeFailed, errorf("purge: %w", err)}
	}
	if _, err = fmt.Fprintln(cmd.OutOrStdout(), o.summary()); err != nil || !o.all {
		return err
	}
	// The cleared entries: deleted now, not left to the Caches of the
	// prefix (which take an unfinished sweep up) or to their TTLs.
	switch n, err := (epochs.Records{Prefix: o.prefix}).Sweep(ctx, rdb, 0, false); {
	case errors.Is(err, epochs.ErrSweepHeld):
		_, err = fmt.Fprintln(cmd.OutOrStdout(), "another process is deleting the cleared entries")
		return err
	case err != nil:
		fmt.Fprintf(cmd.ErrOrStderr(), "corral: purge: the cleared entries were not all deleted (%d were): %v; a Cache of the prefix takes it up, or they expire\n", n, err)
		return nil
	default:
		_, err = fmt.Fprintf(cmd.OutOrStdout(), "deleted %d cleared entries\n", n)
		return err
	}
}

// unapplied returns the error to exit with for errs, apply's: none when
// each of them is an invalidation the Cache queued, and the Cache's Close
// applied them all (none dropped); else errs, joined, saying what became of
// what was queued.
func unapplied(errs []error, dropped bool) error {
	queued := 0
	for _, err := range errs {
		if corralhttp.Queued(err) {
			queued++
		}
	}
	switch {
	case queued == len(errs) && !dropped:
		return nil // Redis answered before the Cache closed
	case queued > 0:
		errs = append(errs, errors.New("what was queued is lost as corral purge exits: run it again once Redis answers"))
	}
	return errors.Join(errs...)
}

// apply purges o's keys, then tags (--tag's and --url's, given), or
// everything, from cache; it returns an error for each failure.
func (o purgeFlags) apply(ctx context.Context, cache *core.Cache, tags []string) []error {
	if o.all {
		if err := cache.Clear(ctx); err != nil {
			return []error{errorf("--all: %w", err)}
		}
		return nil
	}
	purge, purgeTags := cache.Delete, cache.InvalidateTags
	if o.soft {
		purge, purgeTags = cache.Expire, cache.ExpireTags
	}
	var errs []error
	for _, k := range o.keys {
		if err := purge(ctx, k); err != nil {
			errs = append(errs, errorf("--key %q: %w", k, err))
		}
	}
	if len(tags) > 0 {
		if err := purgeTags(ctx, tags...); err != nil {
			errs = append(errs, errorf("%s: %w", o.tagFlags(), err))
		}
	}
	return errs
}

// tagFlags names the flags that gave tags: --tag, --url, or both.
func (o purgeFlags) tagFlags() string {
	switch {
	case len(o.tags) == 0:
		return "--url"
	case len(o.urls) == 0:
		return "--tag"
	}
	return "--tag and --url"
}

// summary is the line corral purge prints once done.
func (o purgeFlags) summary() string {
	if o.all {
		return fmt.Sprintf("purged everything under prefix %q", o.prefix)
	}
	var parts []string
	for _, p := range []struct {
		n         int
		one, many string
	}{{len(o.keys), "key", "keys"}, {len(o.tags), "tag", "tags"}, {len(o.urls), "URL", "URLs"}} {
		switch {
		case p.n == 1:
			parts = append(parts, "1 "+p.one)
		case p.n > 1:
			parts = append(parts, fmt.Sprintf("%d %s", p.n, p.many))
		}
	}
	how := "hard"
	if o.soft {
		how = "soft"
	}
	return fmt.Sprintf("purged %s under prefix %q (%s)", strings.Join(parts, ", "), o.prefix, how)
}
