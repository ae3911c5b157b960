// Package textline prints an error as one line that prints nothing but
// itself. It is a leaf (the standard library only), so that every command
// of the binary can refuse its input the same way without importing the
// package that parses another command's flags.
package textline

import (
	"fmt"
	"strconv"
	"strings"
	"unicode"
	"unicode/utf8"
)

// OneLine puts err on one line that prints nothing but itself: joined
// errors are separated by "; ", and any other control character an input
// brought in (a carriage return, a terminal escape) or byte that is not
// UTF-8 is escaped. The refusal of a configuration is printed this way.
func OneLine(err error) string {
	s := strings.ReplaceAll(err.Error(), "\n", "; ")
	var b strings.Builder
	for i := 0; i < len(s); {
		r, size := utf8.DecodeRuneInString(s[i:])
		switch {
		case r == utf8.RuneError && size == 1:
			fmt.Fprintf(&b, `\x%02x`, s[i])
		case isUnsafeInLine(r):
			b.WriteString(strings.Trim(strconv.QuoteRune(r), "'"))
		default:
			b.WriteString(s[i : i+size])
		}
		i += size
	}
	return b.String()
}

// isUnsafeInLine reports the characters an error line must not print raw:
// control characters (newlines, carriage returns, terminal escapes), the
// Unicode line and paragraph separators, and bidirectional overrides.
func isUnsafeInLine(r rune) bool {
	return unicode.IsControl(r) || r == '\u2028' || r == '\u2029' || unicode.Is(unicode.Bidi_Control, r)
}

// Printable reports whether s is UTF-8 without a character OneLine would
// escape: what a test asks of a line OneLine made.
func Printable(s string) bool {
	return utf8.ValidString(s) && !strings.ContainsFunc(s, isUnsafeInLine)
}
