package guard

import "strings"

// DropInName is the file name of the guard's drop-in in
// /etc/systemd/system/kubelet.service.d/.
const DropInName = "05-nodeconfig-guard.conf"

// SystemdDropIn is a drop-in for kubelet.service that runs the guard (the
// nodeconfig-guard binary at guardPath) before every kubelet start, Restart=
// restarts and boots alike. The leading '-' makes systemd ignore the guard's
// exit status, so even a guard that cannot run at all (a missing binary, a
// noexec mount) never keeps the kubelet from starting; the guard exits 0
// anyway. A guard that hangs would still fail the start at
// TimeoutStartSec=, which is why the command bounds its own run.
func SystemdDropIn(guardPath, dir string) string {
	return "# Written by nodeconfig: before each kubelet start, put last-known-good\n" +
		"# back over a config on trial that keeps the kubelet from starting.\n" +
		"[Service]\n" +
		"ExecStartPre=-" + systemdQuote(guardPath) + " --dir " + systemdQuote(dir) + "\n"
}

// systemdQuote makes s one word of a systemd command line, taken literally:
// '%' specifiers and '$' variables are escaped, and a word with blanks,
// quotes or backslashes is double-quoted with C escapes.
func systemdQuote(s string) string {
	s = strings.NewReplacer("%", "%%", "$", "$$").Replace(s)
	if s != "" && !strings.ContainsAny(s, " \t\n\r\"'\\;") {
		return s
	}
	return `"` + strings.NewReplacer(`\`, `\\`, `"`, `\"`, "\n", `\n`, "\r", `\r`, "\t", `\t`).Replace(s) + `"`
}
