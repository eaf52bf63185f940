// Command corral is the command-line companion of the corral library.
//
//	corral demo    replay a cache stampede and compare strategies
//	corral soak    hammer corral from many processes under chaos; check invariants
//	corral check   check a Redis for corral: version, Cluster, pub/sub, eviction, rights, round trip
//	corral serve   run an HTTP read-through cache in front of an origin, coalescing across the fleet
//	corral purge   invalidate cached entries: by key, tag (a sidecar's surrogate key), sidecar URL, or all
//
// Run `corral help` or `corral demo --help` for the flags.
package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"runtime"
	"runtime/debug"
	"strings"

	"github.com/corralhq/corral/internal/errprefix"
	"github.com/redis/go-redis/v9"
	"github.com/spf13/cobra"
)

func main() {
	redis.SetLogger(redisLog{})
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	err := newRootCmd(os.Stdout, os.Stderr).ExecuteContext(ctx)
	stop()
	if err != nil {
		printError(os.Stderr, err)
		code := 1
		var ec interface{ ExitCode() int }
		if errors.As(err, &ec) {
			code = ec.ExitCode()
		}
		os.Exit(code)
	}
}

// errPrefix is what main prints before each line of an error: once, the
// library's own "corral: " taken off (errorf, printError).
const errPrefix = "corral: "

// errorf is fmt.Errorf for the command's errors, which go without
// errPrefix until main prints them: each error among args is said without
// the errPrefix of the library's errors.
func errorf(format string, args ...any) error {
	return errprefix.Wrapf(errPrefix, format, args...)
}

// errAttr is a log record's "err" attribute: err without the library's
// errPrefix.
func errAttr(err error) slog.Attr { return errprefix.Attr(errPrefix, err) }

// printError writes err to w, each line after errPrefix, once: a joined
// error's lines (several bad variables, say) each read as an error of
// corral's.
func printError(w io.Writer, err error) {
	for _, line := range strings.Split(errprefix.Trim(errPrefix, err).Error(), "\n") {
		if line != "" {
			line = errPrefix + line
		}
		fmt.Fprintln(w, line)
	}
}

// newRootCmd returns the corral command, writing its output to stdout and
// its progress, warnings and help-on-error to stderr.
func newRootCmd(stdout, stderr io.Writer) *cobra.Command {
	root := &cobra.Command{
		Use:   "corral",
		Short: "corral: a stampede-safe read-through cache over Redis",
		Long: `corral puts a stampede-safe read-through cache in front of a slow origin,
with Redis as the shared store and coordinator: one origin load per key per
refresh, however many instances and goroutines ask at once.

This command demonstrates it. Start with:

  corral demo`,
		SilenceUsage:  true, // errors are not usage mistakes once flags parsed
		SilenceErrors: true, // main prints them once, prefixed
	}
	root.SetOut(stdout)
	root.SetErr(stderr)
	// A mistyped flag is a usage mistake: say where the flags are listed.
	root.SetFlagErrorFunc(func(cmd *cobra.Command, err error) error {
		return errorf("%s: %w (see '%s --help')", cmd.Name(), err, cmd.CommandPath())
	})
	root.Version = version()
	root.SetVersionTemplate("corral {{.Version}}\n")
	root.AddCommand(newDemoCmd(), newSoakCmd(), newCheckCmd(), newServeCmd(), newPurgeCmd(), newVersionCmd())
	return root
}

// newVersionCmd is `corral version`: what `corral --version` prints, and
// the Go release and platform it was built with.
func newVersionCmd() *cobra.Command {
	return &cobra.Command{
		Use:   "version",
		Short: "Print corral's version (as --version does), and the Go it was built with",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			_, err := fmt.Fprintf(cmd.OutOrStdout(), "corral %s\n%s %s/%s\n", version(), runtime.Version(), runtime.GOOS, runtime.GOARCH)
			return err
		},
	}
}

// version is corral's version from the binary's build information: the
// module's version when it was built from a published one, else the VCS
// revision it was built at (12 digits, "-dirty" with uncommitted changes),
// else "(devel)".
func version() string {
	info, ok := debug.ReadBuildInfo()
	if !ok {
		return "(devel)"
	}
	if v := info.Main.Version; v != "" && v != "(devel)" {
		return v
	}
	var rev, dirty string
	for _, s := range info.Settings {
		switch {
		case s.Key == "vcs.revision":
			rev = s.Value
		case s.Key == "vcs.modified" && s.Value == "true":
			dirty = "-dirty"
		}
	}
	if rev == "" {
		return "(devel)"
	}
	return rev[:min(len(rev), 12)] + dirty
}

// redisLog takes go-redis's own log lines (a pool's failed dials, say) off
// the terminal: they go to slog at debug level, hidden by default. corral's
// warnings already say what went wrong with Redis, and why.
type redisLog struct{}

func (redisLog) Printf(ctx context.Context, format string, v ...any) {
	slog.DebugContext(ctx, "go-redis: "+fmt.Sprintf(format, v...))
}
