package servekit

import (
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
)

// The socket is its owner's alone, unless --socket-group names a group,
// which may then connect too: mode 0660 and that group.
func TestSocketIsTheOwnersOrItsGroups(t *testing.T) {
	dir := t.TempDir()
	// A group this process may give its files to: its own, or any as root.
	gid := os.Getegid()
	if os.Geteuid() == 0 {
		gid = 65532
	}
	for _, tc := range []struct {
		group   string
		mode    os.FileMode
		wantGID int
	}{
		{"", 0o600, os.Getegid()},
		{strconv.Itoa(gid), 0o660, gid},
	} {
		path := filepath.Join(dir, "g"+tc.group+".sock")
		l, err := listenUnix(path, tc.group)
		if err != nil {
			t.Fatalf("--socket-group %q: %v", tc.group, err)
		}
		fi, err := os.Lstat(path)
		if err != nil {
			t.Fatal(err)
		}
		if fi.Mode()&os.ModeSocket == 0 || fi.Mode().Perm() != tc.mode {
			t.Errorf("--socket-group %q: mode %v, want a socket with %v", tc.group, fi.Mode(), tc.mode)
		}
		if got := int(fi.Sys().(*syscall.Stat_t).Gid); got != tc.wantGID {
			t.Errorf("--socket-group %q: group %d, want %d", tc.group, got, tc.wantGID)
		}
		_ = l.Close()
	}
}

func TestSocketGroupFlagIsChecked(t *testing.T) {
	for _, tc := range []struct {
		flags commonFlags
		want  string
	}{
		{commonFlags{Auth: "none", MetricsAuth: "none", Socket: "/run/x.sock", SocketGroup: "65532"}, ""},
		{commonFlags{Auth: "none", MetricsAuth: "none", SocketGroup: "65532"}, "--socket-group needs --socket"},
		{commonFlags{Auth: "none", MetricsAuth: "none", Socket: "/run/x.sock", SocketGroup: "nonroot"}, "want a numeric group id"},
		{commonFlags{Auth: "none", MetricsAuth: "none", Socket: "/run/x.sock", SocketGroup: "-1"}, "want a numeric group id"},
	} {
		err := tc.flags.Check()
		if (tc.want == "") != (err == nil) || (err != nil && !strings.Contains(err.Error(), tc.want)) {
			t.Errorf("%+v: %v, want %q", tc.flags, err, tc.want)
		}
	}
}
