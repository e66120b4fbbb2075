package guard

import (
	"bytes"
	"fmt"
	"io"
	"os"
	"path/filepath"
)

// Install puts the guard on the host, so that it runs with no pod: the
// running binary (self) copied to bin, and the kubelet unit's drop-in that
// runs it before each start written into unitDir (empty: none). hostBin and
// hostDir are the paths the host sees, which the drop-in names. Each file is
// replaced whole and only when it differs; it says what it changed.
func Install(self, bin, hostBin, hostDir, unitDir string) (changed []string, err error) {
	same, err := sameContent(self, bin)
	if err != nil {
		return nil, err
	}
	if !same {
		if err := os.MkdirAll(filepath.Dir(bin), 0o755); err != nil {
			return nil, err
		}
		if err := copyExecutable(self, bin); err != nil {
			return nil, fmt.Errorf("install the guard's binary at %s: %w", bin, err)
		}
		changed = append(changed, bin)
	}
	if unitDir == "" {
		return changed, nil
	}
	dropIn := filepath.Join(unitDir, DropInName)
	want := []byte(SystemdDropIn(hostBin, hostDir))
	if cur, err := os.ReadFile(dropIn); err == nil && bytes.Equal(cur, want) {
		return changed, nil
	}
	if err := writeFile(dropIn, want, 0o644, false); err != nil {
		return nil, fmt.Errorf("write the kubelet unit's drop-in %s: %w", dropIn, err)
	}
	return append(changed, dropIn), nil
}

// sameContent says whether b exists with a's bytes.
func sameContent(a, b string) (bool, error) {
	fa, err := os.Open(a)
	if err != nil {
		return false, err
	}
	defer fa.Close()
	fb, err := os.Open(b)
	if os.IsNotExist(err) {
		return false, nil
	}
	if err != nil {
		return false, err
	}
	defer fb.Close()
	sa, err := fa.Stat()
	if err != nil {
		return false, err
	}
	sb, err := fb.Stat()
	if err != nil || sa.Size() != sb.Size() {
		return false, err
	}
	const chunk = 1 << 20
	ba, bb := make([]byte, chunk), make([]byte, chunk)
	for {
		na, ea := io.ReadFull(fa, ba)
		nb, eb := io.ReadFull(fb, bb)
		if na != nb || !bytes.Equal(ba[:na], bb[:nb]) {
			return false, nil
		}
		if ea == io.EOF || ea == io.ErrUnexpectedEOF || eb == io.EOF || eb == io.ErrUnexpectedEOF {
			return ea == eb, nil
		}
		if ea != nil {
			return false, ea
		}
		if eb != nil {
			return false, eb
		}
	}
}

// copyExecutable replaces dst with src's bytes, executable, through a
// temporary file and a rename: a kubelet start never runs a half-copied
// guard.
func copyExecutable(src, dst string) error {
	data, err := os.ReadFile(src)
	if err != nil {
		return err
	}
	return writeFile(dst, data, 0o755, false)
}
