// Package termbar draws the CLI's progress bars (github.com/schollz/progressbar)
// on a terminal. A bar polls a counter or the clock on a ticker instead of
// being told of each event, so the work it measures never waits on its lock.
package termbar

import (
	"fmt"
	"io"
	"time"

	"github.com/schollz/progressbar/v3"
)

// tick is how often a bar is redrawn.
const tick = 50 * time.Millisecond

// Bar is a progress bar being drawn. A nil *Bar draws nothing.
type Bar struct {
	quit chan struct{}
	done chan struct{}
}

// Count draws on w, when w is not nil, until Stop: a bar of total with its
// count, labelled label. completed returns the count so far.
func Count(w io.Writer, label string, total int64, completed func() int64) *Bar {
	if w == nil {
		return nil
	}
	bar := newBar(w, label, total, progressbar.OptionShowCount(), progressbar.OptionThrottle(tick))
	return draw(func() { _ = bar.Set64(completed()) }, bar)
}

// Elapsed draws on w, when w is not nil, until Stop: a bar of the time
// elapsed out of length, labelled "label 1.2s/5s". elapsed returns the time
// since the work started.
func Elapsed(w io.Writer, label string, length time.Duration, elapsed func() time.Duration) *Bar {
	if w == nil {
		return nil
	}
	describe := func(e time.Duration) string { return fmt.Sprintf("%s %.1fs/%v", label, e.Seconds(), length) }
	// Throttled a little below the tick, so each tick draws once: the first
	// of the two calls draws, the second is absorbed (the bar then trails
	// its label by one tick).
	bar := newBar(w, describe(0), length.Milliseconds(), progressbar.OptionThrottle(tick*4/5))
	return draw(func() {
		e := min(max(elapsed(), 0), length)
		bar.Describe(describe(e))
		_ = bar.Set64(e.Milliseconds())
	}, bar)
}

func newBar(w io.Writer, description string, total int64, opts ...progressbar.Option) *progressbar.ProgressBar {
	return progressbar.NewOptions64(total, append([]progressbar.Option{
		progressbar.OptionSetWriter(w),
		progressbar.OptionSetDescription(description),
		progressbar.OptionSetWidth(30),
		progressbar.OptionSetPredictTime(false),
		progressbar.OptionClearOnFinish(),
		progressbar.OptionSetRenderBlankState(true),
	}, opts...)...)
}

// draw calls update every tick until Stop, then once more, and finishes bar.
func draw(update func(), bar *progressbar.ProgressBar) *Bar {
	b := &Bar{quit: make(chan struct{}), done: make(chan struct{})}
	go func() {
		defer close(b.done)
		t := time.NewTicker(tick)
		defer t.Stop()
		for {
			select {
			case <-t.C:
				update()
			case <-b.quit:
				update()
				_ = bar.Finish()
				return
			}
		}
	}()
	return b
}

// Stop draws the final state, clears the bar and waits for its goroutine.
func (b *Bar) Stop() {
	if b == nil {
		return
	}
	close(b.quit)
	<-b.done
}
