package supervisor

import (
	"bufio"
	"fmt"
	"io"
	"os"
	"os/exec"
	"os/signal"
	"strconv"
	"strings"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// WatchdogArg is the hidden first argument that makes the binary a
// watchdog (main dispatches it to RunWatchdog).
const WatchdogArg = "__run-watchdog"

// The watchdog is a second process that kills the workload when its claim
// ends even if the supervisor cannot: when the supervisor is paused
// (SIGSTOP, a debugger) or dead. It is started before each child as the
// leader of a new process group, and the child is born into that group, so
// there is no moment at which the child runs unguarded. It holds one
// number, a deadline on CLOCK_MONOTONIC, that the supervisor replaces by
// writing a new one on its stdin, a line each; when the deadline passes, or
// its stdin closes (the supervisor is done with the child, or died), it
// SIGKILLs the whole group, itself included: leftovers of the workload must
// not outlive it either.
//
// RunWatchdog runs it with args (those after WatchdogArg: the first
// deadline) and returns only on bad input.
func RunWatchdog(args []string, stdin io.Reader, stdout, stderr io.Writer) int {
	if len(args) != 1 {
		fmt.Fprintln(stderr, "leader-elector run: watchdog: want one argument, the deadline")
		return ExitBadInput
	}
	first, err := strconv.ParseInt(args[0], 10, 64)
	if err != nil {
		fmt.Fprintf(stderr, "leader-elector run: watchdog: deadline %q: not a number\n", args[0])
		return ExitBadInput
	}
	pgid := unix.Getpgrp()
	if pgid != os.Getpid() {
		// Killing the group would kill someone else's processes.
		fmt.Fprintln(stderr, "leader-elector run: watchdog: not the leader of its own process group")
		return ExitBadInput
	}
	// The supervisor stops the workload by signalling the group, and the
	// watchdog is in it: it must outlast those signals. (Only once the
	// input is known good: an ignored signal stays ignored in every
	// process started afterwards, so a refusal must leave them alone.)
	signal.Ignore(syscall.SIGTERM, syscall.SIGINT, syscall.SIGHUP, syscall.SIGUSR1, syscall.SIGUSR2, syscall.SIGQUIT, syscall.SIGPIPE)
	// Ready: the supervisor starts the child only now, when the signals
	// meant for the child can no longer kill the watchdog.
	if _, err := fmt.Fprintln(stdout, "ready"); err != nil {
		return ExitRuntimeError
	}
	deadlines := make(chan Mono)
	go func() {
		defer close(deadlines)
		sc := bufio.NewScanner(stdin)
		for sc.Scan() {
			if v, err := strconv.ParseInt(strings.TrimSpace(sc.Text()), 10, 64); err == nil {
				deadlines <- Mono(v)
			}
		}
	}()
	deadline := Mono(first)
	timer := time.NewTimer(time.Duration(deadline - monoNow()))
	for {
		select {
		case d, ok := <-deadlines:
			if !ok {
				killGroup(pgid)
				return 0
			}
			deadline = d
			timer.Reset(time.Duration(deadline - monoNow()))
		case <-timer.C:
			// A timer may fire early relative to CLOCK_MONOTONIC only by
			// rounding; check against the clock itself.
			if left := deadline - monoNow(); left > 0 {
				timer.Reset(time.Duration(left))
				continue
			}
			fmt.Fprintf(stderr, "leader-elector run: watchdog: the claim ended and the supervisor did not stop the workload; killing its process group %d\n", pgid)
			// Tell the supervisor, which may only have been paused, that
			// this was the watchdog's doing (the pipe keeps the line).
			fmt.Fprintln(stdout, firedLine)
			killGroup(pgid)
			return 0
		}
	}
}

// firedLine is what the watchdog writes when it killed at the deadline.
const firedLine = "fired"

func killGroup(pgid int) { _ = unix.Kill(-pgid, unix.SIGKILL) }

// watchdog is the supervisor's handle on a running watchdog.
type watchdog struct {
	cmd  *exec.Cmd
	in   io.WriteCloser
	out  *bufio.Reader
	last Mono
}

// startWatchdog starts command (the binary and WatchdogArg) guarding
// deadline, as the leader of a new process group.
func startWatchdog(command []string, deadline Mono, stderr io.Writer) (*watchdog, error) {
	args := append(append([]string{}, command[1:]...), strconv.FormatInt(int64(deadline), 10))
	cmd := exec.Command(command[0], args...)
	cmd.Stderr = stderr
	// No Pdeathsig: when the supervisor dies the watchdog must live on to
	// see its stdin close and kill the group.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	in, err := cmd.StdinPipe()
	if err != nil {
		return nil, err
	}
	out, err := cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("start the watchdog: %w", err)
	}
	w := &watchdog{cmd: cmd, in: in, out: bufio.NewReader(out), last: deadline}
	line, err := w.out.ReadString('\n')
	if err != nil || line != "ready\n" {
		w.finish()
		return nil, fmt.Errorf("the watchdog did not start: %q, %v", line, err)
	}
	return w, nil
}

// set hands the watchdog a new deadline (later or earlier).
func (w *watchdog) set(d Mono) {
	if d == w.last {
		return
	}
	w.last = d
	// An error means the watchdog is gone, which it is only after it
	// killed the group: the child's exit reports that.
	_, _ = fmt.Fprintf(w.in, "%d\n", int64(d))
}

// finish closes the watchdog's stdin, so that it kills what is left of the
// group and itself, and reaps it. It reports whether the watchdog had
// killed the group at its deadline.
func (w *watchdog) finish() (fired bool) {
	_ = w.in.Close()
	rest, _ := io.ReadAll(w.out)
	_ = w.cmd.Wait()
	return strings.Contains(string(rest), firedLine)
}
