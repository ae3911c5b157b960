package textline

import (
	"errors"
	"testing"
)

func TestOneLine(t *testing.T) {
	for _, tc := range []struct {
		name string
		err  error
		want string
	}{
		{"plain", errors.New("--lease-name is required"), "--lease-name is required"},
		{"joined", errors.Join(errors.New("a"), errors.New("b")), "a; b"},
		{"a newline inside one error", errors.New("a\nb"), "a; b"},
		{"a carriage return and a terminal escape", errors.New("x\r\x1b[2Jy"), `x\r\x1b[2Jy`},
		{"not UTF-8", errors.New("not\xffUTF-8"), `not\xffUTF-8`},
		{"a line separator", errors.New("a\u2028b"), `a\u2028b`},
		{"a bidirectional override", errors.New("a\u202eb"), `a\u202eb`},
		{"other Unicode is kept", errors.New("fair share 2–3 ✓"), "fair share 2–3 ✓"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := OneLine(tc.err)
			if got != tc.want {
				t.Errorf("OneLine = %q, want %q", got, tc.want)
			}
			if !Printable(got) {
				t.Errorf("OneLine's %q is not Printable", got)
			}
		})
	}
}
