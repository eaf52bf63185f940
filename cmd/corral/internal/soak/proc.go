package soak

import (
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strings"
	"sync"
	"time"

	"github.com/corralhq/corral"
)

// proc is one worker process, seen from the orchestrator.
type proc struct {
	id    int
	cmd   *exec.Cmd
	stdin io.WriteCloser
	tail  *tailWriter // the end of its stderr

	ready    chan struct{} // closed when it said it is ready
	readDone chan struct{} // closed when its stdout ended
	exited   chan struct{} // closed when it has exited; waitErr is set then
	waitErr  error

	mu       sync.Mutex // guards the fields below
	killed   bool       // we killed it
	stopping bool       // we told it to stop
	done     bool       // it said it is done
	reported bool       // its exit was reported as unexpected
	stats    *corral.Stats
	badLine  string // the first line it wrote that was not a message
}

// collector gathers what every worker reports.
type collector struct {
	mu       sync.Mutex // guards the fields below
	calls    []Call
	degraded []Interval
	breakers []Breaker
}

// startProc starts worker id with configuration wc.
func (s *run) startProc(id int) (*proc, error) {
	wc := s.workerConfig(id)
	env, err := json.Marshal(wc)
	if err != nil {
		return nil, err
	}
	cmd := s.cfg.WorkerCommand()
	if cmd.Env == nil {
		cmd.Env = os.Environ()
	}
	cmd.Env = append(cmd.Env, WorkerEnv+"="+string(env))
	setProcessGroup(cmd)
	p := &proc{id: id, cmd: cmd, tail: &tailWriter{max: 4096},
		ready: make(chan struct{}), readDone: make(chan struct{}), exited: make(chan struct{})}
	if p.stdin, err = cmd.StdinPipe(); err != nil {
		return nil, err
	}
	out, err := cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	cmd.Stderr = p.tail
	if s.cfg.WorkerStderr != nil {
		cmd.Stderr = io.MultiWriter(p.tail, &prefixWriter{w: s.cfg.WorkerStderr, prefix: fmt.Sprintf("worker %d: ", id)})
	}
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("soak: start worker %d: %w", id, err)
	}
	go func() {
		defer close(p.readDone)
		s.read(p, out)
	}()
	go func() {
		<-p.readDone // Wait closes stdout: read it to the end first
		p.waitErr = cmd.Wait()
		close(p.exited)
	}()
	return p, nil
}

// read decodes p's messages until its stdout ends.
func (s *run) read(p *proc, out io.Reader) {
	br := bufio.NewReaderSize(out, 1<<16)
	readyOnce := sync.OnceFunc(func() { close(p.ready) })
	for {
		line, err := br.ReadBytes('\n')
		if len(line) > 0 {
			var m message
			if jerr := json.Unmarshal(line, &m); jerr != nil {
				p.mu.Lock()
				if p.badLine == "" {
					p.badLine = strings.TrimSpace(string(line))
				}
				p.mu.Unlock()
			} else {
				s.absorb(p, &m)
				if m.Ready {
					readyOnce()
				}
			}
		}
		if err != nil {
			return
		}
	}
}

// absorb adds one message of p to the records.
func (s *run) absorb(p *proc, m *message) {
	if m.Stats != nil || m.Done {
		p.mu.Lock()
		if m.Stats != nil {
			p.stats = m.Stats
		}
		p.done = p.done || m.Done
		p.mu.Unlock()
	}
	if len(m.Calls) == 0 && len(m.Errors) == 0 && len(m.Degraded) == 0 && len(m.Breaker) == 0 {
		return
	}
	c := &s.col
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, r := range m.Calls {
		c.calls = append(c.calls, Call{Key: int(r[0]), Worker: p.id, Start: time.Duration(r[1]), End: time.Duration(r[2]), Version: r[3],
			Outcome: corral.EventKind(r[4])})
	}
	for _, b := range m.Breaker {
		c.breakers = append(c.breakers, Breaker{Worker: p.id, At: time.Duration(b[0]), State: corral.EventKind(b[1])})
	}
	for _, e := range m.Errors {
		c.calls = append(c.calls, Call{Key: e.Key, Worker: p.id, Start: time.Duration(e.Start), End: time.Duration(e.End), Err: e.Err})
	}
	for _, d := range m.Degraded {
		c.degraded = append(c.degraded, Interval{Worker: p.id, From: time.Duration(d[0]), To: time.Duration(d[1])})
	}
}

// kill kills p with SIGKILL and waits until it has exited.
func (p *proc) kill() {
	p.mu.Lock()
	p.killed = true
	p.mu.Unlock()
	_ = p.cmd.Process.Kill()
	<-p.exited
}

// stop tells p to stop (EOF on its stdin) and waits until it has exited,
// at most timeout; past that it kills it. It returns a description of what
// went wrong, or "".
func (p *proc) stop(timeout time.Duration) string {
	p.mu.Lock()
	p.stopping = true
	p.mu.Unlock()
	_ = p.stdin.Close()
	t := time.NewTimer(timeout)
	defer t.Stop()
	select {
	case <-p.exited:
	case <-t.C:
		_ = p.cmd.Process.Kill()
		<-p.exited
		return fmt.Sprintf("did not stop within %v of being told to (killed)%s", timeout, p.tail.suffix())
	}
	p.mu.Lock()
	done, bad, reported := p.done, p.badLine, p.reported
	p.mu.Unlock()
	switch {
	case reported: // it had exited by itself first
		return ""
	case p.waitErr != nil:
		return fmt.Sprintf("failed when told to stop: %v%s", p.waitErr, p.tail.suffix())
	case !done:
		return "exited without reporting the end of its calls" + p.tail.suffix()
	case bad != "":
		return fmt.Sprintf("wrote a line that is not a message: %.200q", bad)
	}
	return ""
}

// unexpectedExit returns a description of p's exit when it exited by
// itself (not killed, not told to stop), or "".
func (p *proc) unexpectedExit() string {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.killed || p.stopping {
		return ""
	}
	p.reported = true
	return fmt.Sprintf("exited by itself: %v%s", p.waitErr, p.tail.suffix())
}

// tailWriter keeps the last max bytes written to it.
type tailWriter struct {
	mu  sync.Mutex // guards b
	max int
	b   []byte
}

func (t *tailWriter) Write(p []byte) (int, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.b = append(t.b, p...)
	if len(t.b) > t.max {
		t.b = t.b[len(t.b)-t.max:]
	}
	return len(p), nil
}

// suffix is "; stderr: ..." with the tail, or "" when there is none.
func (t *tailWriter) suffix() string {
	t.mu.Lock()
	defer t.mu.Unlock()
	s := strings.TrimSpace(string(t.b))
	if s == "" {
		return ""
	}
	return "; stderr: " + s
}

// prefixWriter writes each line with a prefix.
type prefixWriter struct {
	mu     sync.Mutex // guards w and partial
	w      io.Writer
	prefix string
	buf    []byte
}

func (p *prefixWriter) Write(b []byte) (int, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.buf = append(p.buf, b...)
	for {
		i := strings.IndexByte(string(p.buf), '\n')
		if i < 0 {
			return len(b), nil
		}
		if _, err := fmt.Fprintf(p.w, "%s%s\n", p.prefix, p.buf[:i]); err != nil {
			return len(b), err
		}
		p.buf = p.buf[i+1:]
	}
}

var errNoRedisServer = errors.New("soak: redis-server is not on PATH: install it (Debian: apt-get install -y redis-server) or give --redis URL")
