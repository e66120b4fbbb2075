package consumer

import (
	"io"
	"os"
	"regexp"
	"strings"
)

// errorLine matches what a consumer says when it fails: the kubelet's
// `"command failed" err="failed to merge kubelet configs: ..."`, klog's E
// lines, or any line naming an error.
var errorLine = regexp.MustCompile(`(?i)(^E\d{4} |error|failed|fatal|panic)`)

// LastErrorLine is the last line naming an error in the last 16 KiB of the
// log file, trimmed to 512 bytes; "" without a file or such a line.
func LastErrorLine(path string) string {
	if path == "" {
		return ""
	}
	f, err := os.Open(path)
	if err != nil {
		return ""
	}
	defer f.Close()
	const window = 16 << 10
	if st, err := f.Stat(); err == nil && st.Size() > window {
		_, _ = f.Seek(st.Size()-window, io.SeekStart)
	}
	buf, err := io.ReadAll(f)
	if err != nil {
		return ""
	}
	lines := strings.Split(string(buf), "\n")
	for i := len(lines) - 1; i >= 0; i-- {
		l := strings.TrimSpace(lines[i])
		if l != "" && errorLine.MatchString(l) {
			if len(l) > 512 {
				l = l[:512] + "..."
			}
			return l
		}
	}
	return ""
}
