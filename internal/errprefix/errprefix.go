// Package errprefix keeps a package's error prefix ("corral: ", "lock: ")
// once, at the front of an error's text, however many times the error is
// wrapped. Errorf is fmt.Errorf for such a package: it puts the prefix in
// front, and says each error among its arguments without the prefix that
// error carries itself, as os.PathError says its inner error under one
// "open name:". The errors keep their identity: errors.Is and errors.As see
// every error wrapped with %w, and every error a Trim wraps.
package errprefix

import (
	"fmt"
	"log/slog"
	"strings"
)

// Corral is the prefix of corral's errors, said once at the front of each
// (the root package's, the transport's and the notifier's alike).
const Corral = "corral: "

// Errorf returns fmt.Errorf(prefix+format, args...), except that each
// error among args is formatted as Trim(prefix, err): without prefix at the
// start of its text, nor at the start of any of its lines (a joined
// error's). A format that begins with a %w of an error carrying prefix
// (a sentinel, say) therefore still reads with prefix once.
func Errorf(prefix, format string, args ...any) error {
	return Wrapf(prefix, prefix+format, args...)
}

// Wrapf is Errorf without prefix in front: for a program whose errors go
// without it until it prints them (a command's main, which adds it once).
func Wrapf(prefix, format string, args ...any) error {
	trimmed := make([]any, len(args))
	for i, a := range args {
		if err, ok := a.(error); ok && err != nil {
			a = Trim(prefix, err)
		}
		trimmed[i] = a
	}
	return fmt.Errorf(format, trimmed...)
}

// Trim returns err said without prefix at the start of its text or of any
// of its lines, and nil for nil. errors.Is and errors.As see err through
// it.
func Trim(prefix string, err error) error {
	if err == nil {
		return nil
	}
	if t, ok := err.(*trimmed); ok && t.prefix == prefix {
		return t
	}
	return &trimmed{prefix: prefix, err: err}
}

// Attr is the "err" attribute of a log record: err without prefix (Trim),
// which the record's message says already.
func Attr(prefix string, err error) slog.Attr { return slog.Any("err", Trim(prefix, err)) }

// TrimText returns s without prefix at its start or at the start of any of
// its lines: the text of an error that travelled as a string (a remote
// load's failure, a cached one).
func TrimText(prefix, s string) string {
	if !strings.Contains(s, prefix) {
		return s
	}
	lines := strings.Split(s, "\n")
	for i, l := range lines {
		lines[i] = strings.TrimPrefix(l, prefix)
	}
	return strings.Join(lines, "\n")
}

// trimmed is an error said without its prefix.
type trimmed struct {
	prefix string
	err    error
}

func (t *trimmed) Error() string { return TrimText(t.prefix, t.err.Error()) }
func (t *trimmed) Unwrap() error { return t.err }
