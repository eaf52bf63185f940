package demo

import (
	"io"
	"time"

	"github.com/schollz/progressbar/v3"
)

// progress draws a bar of the requests completed while one strategy runs.
// It polls a counter instead of being told of each request, so the
// requests under measurement never wait on the bar's lock.
type progress struct {
	quit chan struct{}
	done chan struct{}
}

// progressTick is how often the bar is redrawn.
const progressTick = 50 * time.Millisecond

// startProgress draws on w, when w is not nil, until stop. completed
// returns the requests returned so far.
func startProgress(w io.Writer, label string, total int, completed func() int64) *progress {
	if w == nil {
		return nil
	}
	bar := progressbar.NewOptions(total,
		progressbar.OptionSetWriter(w),
		progressbar.OptionSetDescription(label),
		progressbar.OptionSetWidth(30),
		progressbar.OptionShowCount(),
		progressbar.OptionSetPredictTime(false),
		progressbar.OptionThrottle(progressTick),
		progressbar.OptionClearOnFinish(),
		progressbar.OptionSetRenderBlankState(true),
	)
	p := &progress{quit: make(chan struct{}), done: make(chan struct{})}
	go func() {
		defer close(p.done)
		tick := time.NewTicker(progressTick)
		defer tick.Stop()
		for {
			select {
			case <-tick.C:
				_ = bar.Set64(completed())
			case <-p.quit:
				_ = bar.Set64(completed())
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
