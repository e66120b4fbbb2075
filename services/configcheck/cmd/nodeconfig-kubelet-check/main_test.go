package main

import (
	"bytes"
	"context"
	"os"
	"strings"
	"testing"

	nodeconfigv1 "nodeconfig.io/proto/nodeconfig/v1"
	"nodeconfig.io/services/configcheck"
	"nodeconfig.io/services/configcheck/kubeletcheck"
	"nodeconfig.io/services/configcheck/kubeletexec"
)

// asBinary makes this test binary run as nodeconfig-kubelet-check itself
// when a test starts it through kubeletexec.
const asBinary = "NODECONFIG_KUBELET_CHECK_TEST_MAIN"

func TestMain(m *testing.M) {
	if os.Getenv(asBinary) != "" {
		main()
	}
	os.Exit(m.Run())
}

const valid = "apiVersion: kubelet.config.k8s.io/v1beta1\nkind: KubeletConfiguration\nmaxPods: 110\n"

// The payloads of configcheck's own table that the kubelet judges, valid
// and invalid.
var payloads = []string{
	valid,
	valid + "maxPodz: 3\n", // an unknown field is a warning, as for the kubelet
	valid + "maxPods: 3\n",
	strings.Replace(valid, "KubeletConfiguration", "Pod", 1),
	"kind: KubeletConfiguration\n",
	strings.Replace(valid, "110", "-1", 1),
	valid + "hairpinMode: bogus\n",
	valid + "featureGates: {NoSuchGate: true}\n",
	valid + "evictionHard: {memory.available: lots}\n",
	strings.Repeat("[", 100000) + strings.Repeat("]", 100000),
	"",
}

func TestExitCodesAndWords(t *testing.T) {
	for _, p := range payloads {
		var stdout, stderr bytes.Buffer
		code := run(nil, strings.NewReader(p), &stdout, &stderr)
		err := kubeletcheck.Check(context.Background(), []byte(p))
		switch {
		case err == nil && (code != kubeletexec.ExitValid || stdout.Len() != 0):
			t.Errorf("%.40q: exit %d, stdout %q; want %d and nothing", p, code, stdout.String(), kubeletexec.ExitValid)
		case err != nil && (code != kubeletexec.ExitInvalid || stdout.String() != err.Error()+"\n"):
			t.Errorf("%.40q: exit %d, stdout %q; want %d and %q", p, code, stdout.String(), kubeletexec.ExitInvalid, err.Error())
		}
	}
	var stdout, stderr bytes.Buffer
	if code := run([]string{"--help"}, strings.NewReader(valid), &stdout, &stderr); code != kubeletexec.ExitCannotJudge || !strings.Contains(stderr.String(), "usage") {
		t.Errorf("with arguments: exit %d, stderr %q; want %d and the usage", code, stderr.String(), kubeletexec.ExitCannotJudge)
	}
	big := strings.NewReader(strings.Repeat("#", maxInput+1))
	if code := run(nil, big, &stdout, &stderr); code != kubeletexec.ExitCannotJudge {
		t.Errorf("more than %d bytes: exit %d, want %d", maxInput, code, kubeletexec.ExitCannotJudge)
	}
}

// Through the child process, the reconciler's checker says what the
// nodes' checker says in process, word for word.
func TestChildProcessJudgesAsInProcess(t *testing.T) {
	t.Setenv(asBinary, "1")
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	child := configcheck.Checker{Kubelet: kubeletexec.Runner{Path: exe}.Check}
	inProcess := configcheck.Checker{Kubelet: kubeletcheck.Check}
	ctx := context.Background()
	for _, p := range payloads {
		got := child.Payload(ctx, nodeconfigv1.Validator_VALIDATOR_KUBELET, []byte(p))
		want := inProcess.Payload(ctx, nodeconfigv1.Validator_VALIDATOR_KUBELET, []byte(p))
		if configcheck.Unavailable(got) {
			t.Fatalf("%.40q: %v", p, got)
		}
		if (got == nil) != (want == nil) || (got != nil && got.Error() != want.Error()) {
			t.Errorf("%.40q: child process says %v, in process %v", p, got, want)
		}
	}
}
