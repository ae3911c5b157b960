package main

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// TestStages runs hack/stages.sh, which make test runs, with a stand-in for
// make: stages run in order and each prints its time; the first failure
// ends the run with its exit code; a group a+b runs side by side, its lines
// prefixed with the stage, and fails if either does, once both ended.
func TestStages(t *testing.T) {
	dir := t.TempDir()
	log := filepath.Join(dir, "ran")
	// The stand-in: stage "slow" ends only after another stage has (so it
	// fails, with 9, unless something runs beside it), "bad" fails with 3,
	// and every stage appends its name to the log when it ends.
	fake := filepath.Join(dir, "make")
	script := `#!/usr/bin/env bash
stage="${@: -1}"
case $stage in
slow) for i in $(seq 300); do [[ -s "` + log + `" ]] && break; sleep 0.1; done; [[ -s "` + log + `" ]] || exit 9 ;;
bad) echo "bad says"; echo bad >>"` + log + `"; exit 3 ;;
esac
echo "$stage says"
echo "$stage" >>"` + log + `"
`
	if err := os.WriteFile(fake, []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		name   string
		stages []string
		code   int
		ran    string   // the log, stages in the order they ended
		want   []string // in the output
		absent []string
	}{
		{"in order", []string{"a", "b"}, 0, "a b",
			[]string{"==> stage a: passed in", "==> stage b: passed in", "==> all stages passed in"}, nil},
		{"the first failure ends the run", []string{"a", "bad", "c"}, 3, "a bad",
			[]string{"==> stage bad: FAILED after", "==> bad          FAILED after"}, []string{"stage c", "all stages passed"}},
		{"side by side", []string{"slow+a", "b"}, 0, "a slow b",
			[]string{"[a] a says", "==> stage a: passed in", "[slow] slow says", "==> stage slow: passed in", "==> stage b: passed in", "==> all stages passed in"}, nil},
		{"side by side, one fails", []string{"slow+bad", "c"}, 3, "bad slow",
			[]string{"[bad] bad says", "==> stage bad: FAILED after", "==> stage slow: passed in"}, []string{"stage c", "all stages passed"}},
	} {
		t.Run(c.name, func(t *testing.T) {
			os.Remove(log)
			cmd := exec.Command("bash", append([]string{"hack/stages.sh"}, c.stages...)...)
			cmd.Env = append(os.Environ(), "MAKE="+fake)
			out, err := cmd.CombinedOutput()
			code := 0
			if ee, ok := err.(*exec.ExitError); ok {
				code = ee.ExitCode()
			} else if err != nil {
				t.Fatal(err)
			}
			if code != c.code {
				t.Errorf("exit %d, want %d:\n%s", code, c.code, out)
			}
			ran, _ := os.ReadFile(log)
			if got := strings.Join(strings.Fields(string(ran)), " "); got != c.ran {
				t.Errorf("stages ended %q, want %q", got, c.ran)
			}
			// The order of the stages is the log's; side by side, their
			// lines interleave.
			for _, w := range c.want {
				if !strings.Contains(string(out), w) {
					t.Errorf("output lacks %q:\n%s", w, out)
				}
			}
			for _, a := range c.absent {
				if strings.Contains(string(out), a) {
					t.Errorf("output has %q:\n%s", a, out)
				}
			}
		})
	}
}
