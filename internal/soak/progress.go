package soak

import (
	"fmt"
	"io"
	"time"

	"github.com/schollz/progressbar/v3"
)

// progressTick is how often the bar is redrawn.
const progressTick = 100 * time.Millisecond

// progress draws a bar of the time elapsed in the soak, "soak 3.2s/20s",
// polling the clock, until stop.
type progress struct {
	quit chan struct{}
	done chan struct{}
}

// startProgress draws on w, when w is not nil. elapsed returns the time
// since the soak started.
func startProgress(w io.Writer, length time.Duration, elapsed func() time.Duration) *progress {
	if w == nil {
		return nil
	}
	describe := func(e time.Duration) string { return fmt.Sprintf("soak %.1fs/%v", e.Seconds(), length) }
	bar := progressbar.NewOptions64(length.Milliseconds(),
		progressbar.OptionSetWriter(w),
		progressbar.OptionSetDescription(describe(0)),
		progressbar.OptionSetWidth(30),
		progressbar.OptionSetPredictTime(false),
		progressbar.OptionClearOnFinish(),
		progressbar.OptionSetRenderBlankState(true),
		progressbar.OptionThrottle(progressTick*4/5),
	)
	p := &progress{quit: make(chan struct{}), done: make(chan struct{})}
	update := func() {
		e := min(max(elapsed(), 0), length)
		bar.Describe(describe(e))
		_ = bar.Set64(e.Milliseconds())
	}
	go func() {
		defer close(p.done)
		t := time.NewTicker(progressTick)
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
