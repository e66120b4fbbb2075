// Package powercut runs a program on the real file system and, at a
// simulated power cut, takes back every write it had not made durable. A
// file keeps what it held at its last fsync (or fdatasync,
// sync_file_range, syncfs, sync), a directory the entries it had at its
// own last fsync, and nothing else survives: what POSIX promises, and no
// more. A new file whose name survived but whose data was never synced
// comes back empty.
//
// The program runs unmodified: a seccomp filter hands each of its sync
// calls to the Disk, which copies what the call makes durable before
// letting the call go on. The copies are kept per inode (device, number
// and birth time, so a reused number is another file), which is what a
// directory's entry names: a rename that was never followed by the
// directory's fsync is undone, whatever was synced under the new name.
package powercut

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"sync"
	"testing"

	"golang.org/x/sys/unix"
)

// Disk is the durable state of a few directory trees (the roots), kept as
// the processes it launched synced them.
type Disk struct {
	roots []string
	dir   string // the socket's directory
	ln    *net.UnixListener
	stop  chan struct{}
	wg    sync.WaitGroup

	mu sync.Mutex
	// rootKeys are the roots' own inodes: a root itself always survives.
	rootKeys map[string]inodeKey
	dirs     map[inodeKey]map[string]entry
	files    map[inodeKey]content
	syncs    int
	err      error // the first failure to record a sync
}

// inodeKey names one file for its whole life.
type inodeKey struct {
	dev, ino  uint64
	btimeSec  int64
	btimeNsec uint32
}

// entry is one name in a directory.
type entry struct {
	key  inodeKey
	mode fs.FileMode
	link string // a symlink's target
}

type content struct {
	data []byte
	perm fs.FileMode
}

// New keeps the roots (existing directories) as they are now, all durable,
// and listens for processes to launch. The test's cleanup stops it.
func New(t testing.TB, roots ...string) *Disk {
	t.Helper()
	dir, err := os.MkdirTemp("", "powercut")
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.ListenUnix("unix", &net.UnixAddr{Name: filepath.Join(dir, "disk.sock"), Net: "unix"})
	if err != nil {
		t.Fatal(err)
	}
	d := &Disk{roots: roots, dir: dir, ln: ln, stop: make(chan struct{})}
	if err := d.reset(); err != nil {
		t.Fatal(err)
	}
	d.wg.Add(1)
	go d.accept()
	t.Cleanup(d.close)
	return d
}

// Command returns what to start instead of program: this test binary,
// which (in MaybeExec) installs the filter and becomes program with the
// same arguments, and the environment entries that tell it so.
func (d *Disk) Command(program string) (path string, env []string, err error) {
	self, err := os.Executable()
	if err != nil {
		return "", nil, err
	}
	return self, []string{envExec + "=" + program, envSocket + "=" + d.ln.Addr().String()}, nil
}

// Syncs counts the sync calls recorded so far.
func (d *Disk) Syncs() int {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.syncs
}

// Cut is the power cut: every root is made what a restart would find,
// only what was synced. The caller has killed every process it launched
// (and waited for their exit). Afterwards all that is there is durable.
func (d *Disk) Cut() error {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.err != nil {
		return d.err
	}
	for _, root := range d.roots {
		if err := d.restoreLocked(root, d.rootKeys[root]); err != nil {
			return fmt.Errorf("power cut: %w", err)
		}
	}
	return d.resetLocked()
}

func (d *Disk) reset() error {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.resetLocked()
}

// resetLocked takes every root as it is now for durable.
func (d *Disk) resetLocked() error {
	d.rootKeys, d.dirs, d.files = map[string]inodeKey{}, map[inodeKey]map[string]entry{}, map[inodeKey]content{}
	for _, root := range d.roots {
		key, err := d.syncTreeLocked(root)
		if err != nil {
			return err
		}
		d.rootKeys[root] = key
	}
	return nil
}

// syncTreeLocked records path and everything under it as durable, as a
// sync(2) does, and returns path's inode.
func (d *Disk) syncTreeLocked(path string) (inodeKey, error) {
	f, err := os.Open(path)
	if err != nil {
		return inodeKey{}, err
	}
	defer f.Close()
	key, mode, err := d.recordLocked(f)
	if err != nil || !mode.IsDir() {
		return key, err
	}
	for name, e := range d.dirs[key] {
		if e.mode.IsDir() || e.mode.IsRegular() {
			if _, err := d.syncTreeLocked(filepath.Join(path, name)); err != nil && !errors.Is(err, fs.ErrNotExist) {
				return key, err
			}
		}
	}
	return key, nil
}

// recordLocked keeps what an fsync of f makes durable: a file's bytes, or
// a directory's entries.
func (d *Disk) recordLocked(f *os.File) (inodeKey, fs.FileMode, error) {
	key, mode, err := statKey(int(f.Fd()), "", unix.AT_EMPTY_PATH)
	if err != nil {
		return key, mode, fmt.Errorf("stat %s: %w", f.Name(), err)
	}
	switch {
	case mode.IsDir():
		entries, err := readEntries(f)
		if err != nil {
			return key, mode, err
		}
		d.dirs[key] = entries
	case mode.IsRegular():
		data, err := io.ReadAll(f)
		if err != nil {
			return key, mode, fmt.Errorf("read %s: %w", f.Name(), err)
		}
		d.files[key] = content{data: data, perm: mode.Perm()}
	}
	return key, mode, nil
}

// readEntries lists a directory's names with the inode each names.
func readEntries(dir *os.File) (map[string]entry, error) {
	names, err := dir.Readdirnames(-1)
	if err != nil {
		return nil, fmt.Errorf("list %s: %w", dir.Name(), err)
	}
	entries := make(map[string]entry, len(names))
	for _, name := range names {
		key, mode, err := statKey(int(dir.Fd()), name, unix.AT_SYMLINK_NOFOLLOW)
		if errors.Is(err, unix.ENOENT) {
			continue // gone since the listing: not in the directory now
		}
		if err != nil {
			return nil, fmt.Errorf("stat %s in %s: %w", name, dir.Name(), err)
		}
		e := entry{key: key, mode: mode}
		if mode&fs.ModeSymlink != 0 {
			buf := make([]byte, unix.PathMax)
			n, err := unix.Readlinkat(int(dir.Fd()), name, buf)
			if err != nil {
				return nil, fmt.Errorf("readlink %s in %s: %w", name, dir.Name(), err)
			}
			e.link = string(buf[:n])
		}
		entries[name] = e
	}
	return entries, nil
}

// statKey identifies the inode at path relative to dirfd.
func statKey(dirfd int, path string, flags int) (inodeKey, fs.FileMode, error) {
	var st unix.Statx_t
	if err := unix.Statx(dirfd, path, flags, unix.STATX_BASIC_STATS|unix.STATX_BTIME, &st); err != nil {
		return inodeKey{}, 0, err
	}
	key := inodeKey{dev: unix.Mkdev(st.Dev_major, st.Dev_minor), ino: st.Ino}
	if st.Mask&unix.STATX_BTIME != 0 {
		key.btimeSec, key.btimeNsec = st.Btime.Sec, st.Btime.Nsec
	}
	return key, fileMode(uint32(st.Mode)), nil
}

func fileMode(m uint32) fs.FileMode {
	mode := fs.FileMode(m & 0o777)
	switch m & unix.S_IFMT {
	case unix.S_IFDIR:
		mode |= fs.ModeDir
	case unix.S_IFLNK:
		mode |= fs.ModeSymlink
	case unix.S_IFREG:
	default:
		mode |= fs.ModeIrregular
	}
	return mode
}

// restoreLocked makes dir hold its durable entries (none when it was
// never synced), each file its durable bytes (none when never synced).
func (d *Disk) restoreLocked(dir string, key inodeKey) error {
	names, err := os.ReadDir(dir)
	if err != nil {
		return err
	}
	for _, n := range names {
		if err := os.RemoveAll(filepath.Join(dir, n.Name())); err != nil {
			return err
		}
	}
	for name, e := range d.dirs[key] {
		path := filepath.Join(dir, name)
		switch {
		case e.mode.IsDir():
			if err := os.Mkdir(path, e.mode.Perm()); err != nil {
				return err
			}
			if err := d.restoreLocked(path, e.key); err != nil {
				return err
			}
		case e.mode.IsRegular():
			c, ok := d.files[e.key]
			if !ok {
				c.perm = e.mode.Perm()
			}
			if err := os.WriteFile(path, c.data, c.perm); err != nil {
				return err
			}
			if err := os.Chmod(path, c.perm); err != nil {
				return err
			}
		case e.mode&fs.ModeSymlink != 0:
			if err := os.Symlink(e.link, path); err != nil {
				return err
			}
		default:
			// Sockets, fifos: nothing a restart would find usable.
		}
	}
	return nil
}

// accept takes each launched process's listener and serves it.
func (d *Disk) accept() {
	defer d.wg.Done()
	for {
		conn, err := d.ln.AcceptUnix()
		if err != nil {
			return // closed
		}
		listener, err := receiveListener(conn)
		if err != nil {
			d.fail(err)
			_ = conn.Close()
			continue
		}
		d.wg.Add(1)
		go d.serve(listener)
		_, _ = conn.Write([]byte{1})
		_ = conn.Close()
	}
}

// receiveListener reads the file descriptor a launcher sends.
func receiveListener(conn *net.UnixConn) (int, error) {
	oob := make([]byte, unix.CmsgSpace(4))
	_, oobn, _, _, err := conn.ReadMsgUnix(make([]byte, 1), oob)
	if err != nil {
		return -1, fmt.Errorf("read the listener: %w", err)
	}
	msgs, err := unix.ParseSocketControlMessage(oob[:oobn])
	if err != nil || len(msgs) != 1 {
		return -1, fmt.Errorf("the launcher sent no listener (%v)", err)
	}
	fds, err := unix.ParseUnixRights(&msgs[0])
	if err != nil || len(fds) != 1 {
		return -1, fmt.Errorf("the launcher sent no listener (%v)", err)
	}
	return fds[0], nil
}

// serve records each sync call of one launched process (and its
// children) until none is left or the Disk stops.
func (d *Disk) serve(listener int) {
	defer d.wg.Done()
	defer unix.Close(listener)
	for {
		select {
		case <-d.stop:
			return
		default:
		}
		n, ok, err := receive(listener, 200)
		if errors.Is(err, errGone) {
			return
		}
		if err != nil {
			d.fail(fmt.Errorf("receive a sync call: %w", err))
			return
		}
		if !ok {
			continue
		}
		d.record(listener, n)
		if err := proceed(listener, n.ID); err != nil {
			d.fail(fmt.Errorf("let a sync call go on: %w", err))
		}
	}
}

// record keeps what one sync call makes durable, before it runs.
func (d *Disk) record(listener int, n seccompNotif) {
	d.mu.Lock()
	defer d.mu.Unlock()
	switch n.Data.Nr {
	case unix.SYS_SYNC, unix.SYS_SYNCFS:
		for _, root := range d.roots {
			if _, err := d.syncTreeLocked(root); err != nil {
				d.err = errors.Join(d.err, err)
			}
		}
	default:
		f, err := os.Open("/proc/" + strconv.Itoa(int(n.Pid)) + "/fd/" + strconv.Itoa(int(n.Data.Args[0])))
		if err != nil {
			// Not an open file (the call itself fails) or its caller is
			// gone: nothing becomes durable.
			return
		}
		defer f.Close()
		if !stillWaiting(listener, n.ID) {
			return // the pid may name another process by now
		}
		if _, _, err := d.recordLocked(f); err != nil {
			d.err = errors.Join(d.err, err)
		}
	}
	d.syncs++
}

func (d *Disk) fail(err error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.err = errors.Join(d.err, err)
}

func (d *Disk) close() {
	close(d.stop)
	_ = d.ln.Close()
	d.wg.Wait()
	_ = os.RemoveAll(d.dir)
}
