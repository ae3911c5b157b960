package main

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/leader-elector/leader-elector/api"
	"github.com/leader-elector/leader-elector/test/harness"
)

// What the demo shows of an app beside each candidate: a child supervised
// by `leader-elector run`, and an app watching GET /events.

// childScript is each supervised child: it says when it starts (with its
// term's fencing token) and when it is stopped. The supervisor starts it
// when its candidate's claim begins and stops it when the claim ends.
const childScript = `echo "started: leading with fencing token $LEADER_ELECTOR_FENCING_TOKEN"
trap 'echo "stopped (SIGTERM): its claim ended"; exit 0' TERM
while :; do sleep 0.2; done`

// supervisors are the `leader-elector run` processes of the candidates.
type supervisors struct {
	cmds []*exec.Cmd
	// started gets a value each time a candidate's child says it started.
	started map[string]chan struct{}
	wg      sync.WaitGroup // the readers of their output
	once    sync.Once
}

// childStartBound bounds how long after its candidate leads a child says it
// started: the supervisor's --start-delay (--stop-grace + 500ms), one poll,
// and slack for a loaded machine. A bound for the demo, not a target.
const childStartBound = 5 * time.Second

// superviseAll starts `leader-elector run` beside each candidate; each
// child's lines are said with its candidate's name. The supervisors' own
// logs go to work/<name>-run.log.
func superviseAll(cs []*harness.Candidate, binary, work string) (*supervisors, error) {
	s := &supervisors{started: map[string]chan struct{}{}}
	for _, c := range cs {
		if err := s.start(c, binary, work); err != nil {
			return s, err
		}
	}
	say("Each candidate has a child under `leader-elector run`: it runs only while its candidate leads")
	return s, nil
}

func (s *supervisors) start(c *harness.Candidate, binary, work string) error {
	log, err := os.Create(filepath.Join(work, c.Name()+"-run.log"))
	if err != nil {
		return err
	}
	defer log.Close() // the child process holds its own descriptor
	// Not tied to ctx: on Ctrl-C stop ends them gracefully, so that each
	// stops its child first.
	cmd := exec.Command(binary, "run", "--url="+c.APIURL(), "--stop-grace=500ms", "--", "sh", "-c", childScript)
	cmd.Env = harness.CleanEnv()
	cmd.Stderr = log
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		return err
	}
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("leader-elector run beside %s: %w", c.Name(), err)
	}
	s.cmds = append(s.cmds, cmd)
	started := make(chan struct{}, 16)
	s.started[c.Name()] = started
	s.wg.Add(1)
	go func() {
		defer s.wg.Done()
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			say("  %s's child: %s", c.Name(), sc.Text())
			if strings.HasPrefix(sc.Text(), "started") {
				select {
				case started <- struct{}{}:
				default:
				}
			}
		}
	}()
	return nil
}

// waitStarted waits until the child of the candidate named has said it
// started (once more), so that the story is told in order.
func (s *supervisors) waitStarted(ctx context.Context, name string) error {
	select {
	case <-s.started[name]:
		return nil
	case <-time.After(childStartBound):
		return fmt.Errorf("%s leads, but its supervised child did not start within %v", name, childStartBound)
	case <-ctx.Done():
		return ctx.Err()
	}
}

// stop ends the supervisors gracefully (each stops its child first), and
// returns once their output is said. Later calls do nothing.
func (s *supervisors) stop() {
	s.once.Do(func() {
		for _, cmd := range s.cmds {
			_ = cmd.Process.Signal(syscall.SIGTERM)
		}
		for _, cmd := range s.cmds {
			done := make(chan struct{})
			go func() { _ = cmd.Wait(); close(done) }()
			select {
			case <-done:
			case <-time.After(exitTimeout):
				_ = cmd.Process.Kill()
				<-done
			}
		}
		s.wg.Wait()
	})
}

// releaseWatched shows what an app that watches GET /events sees when its
// pod's term ends: it opens the leader's stream, asks that leader to step
// down (POST /release, as an app may), says the "lost" event the stream
// delivers, and returns the next leader.
func releaseWatched(ctx context.Context, g *harness.Group[*harness.Candidate], children *supervisors, leader *harness.Candidate) (*harness.Candidate, error) {
	lost, closeStream, err := watchLost(ctx, leader.APIURL())
	if err != nil {
		return nil, err
	}
	defer closeStream()
	say("An app watches GET %s/events; it asks its sidecar to step down: POST /release to %s", leader.APIURL(), leader.Name())
	sent := time.Now()
	r, err := leader.API().Release(ctx)
	if err != nil {
		return nil, fmt.Errorf("POST /release to %s: %w", leader.Name(), err)
	}
	if !r.Released {
		return nil, fmt.Errorf("POST /release to %s: it did not lead", leader.Name())
	}
	// A bound for the demo's own sake, not a target: the event follows the
	// release at once.
	select {
	case l := <-lost:
		say("%s's event stream: event: lost, reason %q, fencing token %d: the app stops its leader work now", leader.Name(), l.Reason, l.FencingToken)
	case <-time.After(renewDeadline):
		return nil, fmt.Errorf("%s's event stream said no \"lost\" within %v of the release", leader.Name(), renewDeadline)
	case <-ctx.Done():
		return nil, ctx.Err()
	}
	next, err := g.WaitLeader(ctx, leaseDuration+5*time.Second, leader)
	if err != nil {
		return nil, err
	}
	say("%s leads %v after the release; %s stays a candidate", next.Name(), time.Since(sent).Round(time.Millisecond), leader.Name())
	show(ctx, g)
	return next, children.waitStarted(ctx, next.Name())
}

// watchLost reads the GET /events stream of the sidecar at baseURL and
// sends on the channel the data of its "lost" events (the first one at
// least: the channel holds one). It returns once the stream is open, so a
// change after it is seen. closeStream ends it.
func watchLost(ctx context.Context, baseURL string) (lost <-chan api.Lost, closeStream func(), err error) {
	ctx, cancel := context.WithCancel(ctx)
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, baseURL+"/events", nil)
	if err != nil {
		cancel()
		return nil, nil, err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		cancel()
		return nil, nil, fmt.Errorf("GET %s/events: %w", baseURL, err)
	}
	if resp.StatusCode != http.StatusOK {
		resp.Body.Close()
		cancel()
		return nil, nil, fmt.Errorf("GET %s/events: %s", baseURL, resp.Status)
	}
	ch := make(chan api.Lost, 1)
	go func() {
		defer resp.Body.Close()
		event := ""
		sc := bufio.NewScanner(resp.Body)
		for sc.Scan() {
			line := sc.Text()
			if name, ok := strings.CutPrefix(line, "event: "); ok {
				event = name
				continue
			}
			data, ok := strings.CutPrefix(line, "data: ")
			var l api.Lost
			if ok && event == "lost" && json.Unmarshal([]byte(data), &l) == nil {
				select {
				case ch <- l:
				default:
				}
			}
			if line == "" {
				event = ""
			}
		}
	}()
	return ch, cancel, nil
}
