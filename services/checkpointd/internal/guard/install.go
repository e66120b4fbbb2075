package guard

import (
	"bytes"
	"fmt"
	"io"
	"os"
	"path/filepath"

	"nodeconfig.io/services/servekit/atomicfile"
)

// Install puts the guard on the host, so that it runs with no pod: the
// guard's binary (self) copied to bin, and the kubelet unit's drop-in that
// runs it before each start written into unitDir (empty: none). hostBin and
// hostDir are the paths the host sees, which the drop-in names. Each file is
// replaced whole and only when it differs; it says what it changed.
func Install(self, bin, hostBin, hostDir, unitDir string) (changed []string, err error) {
	same, err := sameContent(self, bin)
	if err != nil {
		return nil, err
	}
	if !same {
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
	if err := writeInExistingDir(dropIn, want); err != nil {
		return nil, fmt.Errorf("write the kubelet unit's drop-in %s: %w", dropIn, err)
	}
	return append(changed, dropIn), nil
}

// sameContent says whether b exists with a's bytes. The binary is tens of
// megabytes and read at every agent start, so sizes are compared first (an
// upgrade almost always changes the size, and then no byte is read), and
// the bytes are streamed, each file read at most once.
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
	if same, err := sameSize(fa, fb); err != nil || !same {
		return false, err
	}
	return sameBytes(fa, fb)
}

// sameSize says whether the open files a and b are equally long.
func sameSize(a, b *os.File) (bool, error) {
	sa, err := a.Stat()
	if err != nil {
		return false, err
	}
	sb, err := b.Stat()
	if err != nil {
		return false, err
	}
	return sa.Size() == sb.Size(), nil
}

// sameBytes compares a and b chunk by chunk, so that neither sits in
// memory whole, and stops at the first difference.
func sameBytes(a, b io.Reader) (bool, error) {
	const chunk = 1 << 20
	ba, bb := make([]byte, chunk), make([]byte, chunk)
	for {
		na, err := readChunk(a, ba)
		if err != nil {
			return false, err
		}
		nb, err := readChunk(b, bb)
		if err != nil {
			return false, err
		}
		if !bytes.Equal(ba[:na], bb[:nb]) {
			return false, nil
		}
		// Equal chunks are equally long, so a short one ends both.
		if na < chunk {
			return true, nil
		}
	}
}

// readChunk fills buf from r as far as r goes; the end of r is no error.
func readChunk(r io.Reader, buf []byte) (int, error) {
	n, err := io.ReadFull(r, buf)
	if err == io.EOF || err == io.ErrUnexpectedEOF {
		return n, nil
	}
	return n, err
}

// copyExecutable replaces dst with src's bytes, executable, through a
// temporary file and a rename: a kubelet start never runs a half-copied
// guard. The bytes are streamed, not read into memory whole.
func copyExecutable(src, dst string) error {
	f, err := os.Open(src)
	if err != nil {
		return err
	}
	defer f.Close()
	return atomicfile.WriteFrom(dst, f, 0o755, 0o755)
}
