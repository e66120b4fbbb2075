// Package safeout keeps what nodes wrote from driving the reader's
// terminal. Much of what the plugin prints comes from the nodes (their
// condition messages, errors, the kubelet's last words) and any node's root
// can write it: an escape sequence in it could rewrite the screen, hide
// lines or set the terminal's title. Every byte the plugin writes passes
// through Writer, which shows control characters instead of sending them.
// (k8s.io/cli-runtime's printers.EscapeTerminal does this for ESC and CR
// only, per string, and would bring its dependencies along.)
package safeout

import (
	"fmt"
	"io"
	"unicode/utf8"
)

// Writer wraps w: every control character but tab and newline is written
// as \u00XX, which is also a valid escape inside a JSON string.
func Writer(w io.Writer) io.Writer { return escaper{w} }

type escaper struct{ w io.Writer }

func (e escaper) Write(p []byte) (int, error) {
	out := make([]byte, 0, len(p))
	for i := 0; i < len(p); {
		r, size := utf8.DecodeRune(p[i:])
		if control(r) && size == len(string(r)) {
			out = fmt.Appendf(out, `\u%04x`, r)
		} else {
			out = append(out, p[i:i+size]...)
		}
		i += size
	}
	if _, err := e.w.Write(out); err != nil {
		return 0, err
	}
	return len(p), nil
}

// control is C0 but tab and newline, DEL, and C1 (0x9b is a one-byte CSI
// to some terminals).
func control(r rune) bool {
	return (r < 0x20 && r != '\t' && r != '\n') || (r >= 0x7f && r <= 0x9f)
}
