package main

import (
	"io"
	"time"

	"github.com/schollz/progressbar/v3"
)

// progress is the run's progress bar on stderr (github.com/schollz/progressbar):
// one step per trial, described by the trial about to run. A nil *progress
// draws nothing.
type progress struct {
	bar     *progressbar.ProgressBar
	started bool
}

func newProgress(w io.Writer, steps int) *progress {
	if w == nil {
		return nil
	}
	return &progress{bar: progressbar.NewOptions(steps,
		progressbar.OptionSetWriter(w),
		progressbar.OptionSetWidth(30),
		progressbar.OptionShowCount(),
		progressbar.OptionShowElapsedTimeOnFinish(),
		progressbar.OptionThrottle(100*time.Millisecond),
		progressbar.OptionSetRenderBlankState(true),
		progressbar.OptionSetPredictTime(false),
	)}
}

// step marks the previous trial done and describes the next.
func (p *progress) step(desc string) {
	if p == nil {
		return
	}
	p.bar.Describe(desc)
	if p.started {
		_ = p.bar.Add(1)
	}
	p.started = true
}

func (p *progress) finish() {
	if p == nil {
		return
	}
	_ = p.bar.Finish()
}
