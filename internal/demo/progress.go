package demo

import (
	"fmt"
	"io"
	"time"

	"github.com/schollz/progressbar/v3"
)

// progress draws a bar while one strategy runs: of the requests completed
// (stampede) or of the time elapsed (expiry). It polls a counter or the
// clock instead of being told of each request, so the requests under
// measurement never wait on the bar's lock.
type progress struct {
	quit chan struct{}
	done chan struct{}
}

// progressTick is how often the bar is redrawn.
const progressTick = 50 * time.Millisecond

// startProgress draws on w, when w is not nil, until stop: a bar of total
// requests with its count. completed returns the requests returned so far.
func startProgress(w io.Writer, label string, total int, completed func() int64) *progress {
	if w == nil {
		return nil
	}
	bar := newBar(w, label, int64(total), progressbar.OptionShowCount(), progressbar.OptionThrottle(progressTick))
	return drawEvery(progressTick, func() { _ = bar.Set64(completed()) }, bar)
}

// startTimeProgress draws on w, when w is not nil, until stop: a bar of the
// time elapsed out of length, labelled "label 1.2s/5s". elapsed returns the
// time since the requests started.
func startTimeProgress(w io.Writer, label string, length time.Duration, elapsed func() time.Duration) *progress {
	if w == nil {
		return nil
	}
	describe := func(e time.Duration) string { return fmt.Sprintf("%s %.1fs/%v", label, e.Seconds(), length) }
	// Throttled a little below the tick, so each tick draws once: the first
	// of the two calls draws, the second is absorbed (the bar then trails
	// its label by one tick).
	bar := newBar(w, describe(0), length.Milliseconds(), progressbar.OptionThrottle(progressTick*4/5))
	return drawEvery(progressTick, func() {
		e := min(elapsed(), length)
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

// drawEvery calls update every tick until stop, then once more, and
// finishes bar.
func drawEvery(tick time.Duration, update func(), bar *progressbar.ProgressBar) *progress {
	p := &progress{quit: make(chan struct{}), done: make(chan struct{})}
	go func() {
		defer close(p.done)
		t := time.NewTicker(tick)
		defer t.Stop()
		for {
			select {
			case <-t.C:
				update()
			case <-p.quit:
				update()
				_ = bar.Finish()
				return
			}
		}
	}()
	return p
}

// stop draws the final state, clears the bar and waits for its goroutine.
func (p *progress) stop() {
	if p == nil {
		return
	}
	close(p.quit)
	<-p.done
}
