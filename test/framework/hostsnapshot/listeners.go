package hostsnapshot

import (
	"fmt"
	"net"
	"sort"
	"strconv"
	"strings"

	"github.com/prometheus/procfs"
)

// tcpListen is the state of a listening socket in /proc/net/tcp.
const tcpListen = 10

// Listener is a listening TCP socket of this network namespace.
type Listener struct {
	Addr string // "ip:port"
	Port uint64
	// PIDs hold it open (none when its holder could not be read).
	PIDs []int
	// Process is one holder, as "pid executable".
	Process string
}

// Listeners lists every listening TCP socket (IPv4 and IPv6) with the
// processes that hold it, found by the socket's inode in their open files.
func Listeners() ([]Listener, error) {
	pfs, err := procfs.NewDefaultFS()
	if err != nil {
		return nil, err
	}
	byInode := map[uint64]*Listener{}
	var ls []*Listener
	for _, read := range []func() (procfs.NetTCP, error){pfs.NetTCP, pfs.NetTCP6} {
		sockets, err := read()
		if err != nil {
			return nil, err
		}
		for _, s := range sockets {
			if s.St != tcpListen {
				continue
			}
			l := &Listener{Addr: net.JoinHostPort(s.LocalAddr.String(), strconv.FormatUint(s.LocalPort, 10)), Port: s.LocalPort}
			byInode[s.Inode] = l
			ls = append(ls, l)
		}
	}
	procs, err := pfs.AllProcs()
	if err != nil {
		return nil, err
	}
	for _, p := range procs {
		targets, err := p.FileDescriptorTargets()
		if err != nil {
			continue
		}
		for _, t := range targets {
			inode, ok := strings.CutPrefix(t, "socket:[")
			if !ok {
				continue
			}
			n, err := strconv.ParseUint(strings.TrimSuffix(inode, "]"), 10, 64)
			if err != nil {
				continue
			}
			if l, ok := byInode[n]; ok {
				l.PIDs = append(l.PIDs, p.PID)
				if l.Process == "" {
					exe, _ := p.Executable()
					l.Process = fmt.Sprintf("%d %s", p.PID, exe)
				}
			}
		}
	}
	out := make([]Listener, 0, len(ls))
	for _, l := range ls {
		out = append(out, *l)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Addr < out[j].Addr })
	return out, nil
}

// Tree is pid and every process descending from it now.
func Tree(pid int) (map[int]bool, error) {
	pfs, err := procfs.NewDefaultFS()
	if err != nil {
		return nil, err
	}
	all, err := pfs.AllProcs()
	if err != nil {
		return nil, err
	}
	children := map[int][]int{}
	for _, p := range all {
		if st, err := p.Stat(); err == nil {
			children[st.PPID] = append(children[st.PPID], p.PID)
		}
	}
	tree := map[int]bool{}
	next := []int{pid}
	for len(next) > 0 {
		p := next[0]
		next = next[1:]
		if tree[p] {
			continue
		}
		tree[p] = true
		next = append(next, children[p]...)
	}
	return tree, nil
}
