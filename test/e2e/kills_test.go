package e2e

import (
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc"
	corev1 "k8s.io/api/core/v1"

	nodeconfigv1 "nodeconfig.io/proto/nodeconfig/v1"
	"nodeconfig.io/test/framework/proc"
	"nodeconfig.io/test/framework/sim"
)

// rolloutPayload is version v of a 64 KiB config, so a torn target shows.
func rolloutPayload(v int) string {
	head := fmt.Sprintf("maxPods: %d\n# ", 100+v)
	return head + strings.Repeat(strconv.Itoa(v%10), 64<<10-len(head)-1) + "\n"
}

// checkpointd is SIGKILLed at random moments on random nodes while config
// after config rolls out to them. After every kill the store opens, the
// node's last-known-good is no older than before the kill, and the target
// file is one whole config; every rollout still completes.
func TestCheckpointdKillsDuringRolloutsLoseNothing(t *testing.T) {
	wantKills := 40
	if v, err := strconv.Atoi(os.Getenv("ROLLOUT_KILLS")); err == nil {
		wantKills = v
	}
	e := newEnv(t, 3)
	payloads := map[string]bool{}
	e.configMap("cfg", map[string]string{"config.yaml": rolloutPayload(0)})
	payloads[rolloutPayload(0)] = true
	e.use(e.label, "cfg", map[string]any{"soakSeconds": int64(1)})

	// The killer: one node at a time, so each kill's before/after is clear.
	var (
		mu       sync.Mutex
		kills    int
		problems []string
	)
	ctx, stop := context.WithCancel(e.ctx)
	killerDone := make(chan struct{})
	go func() {
		defer close(killerDone)
		rng := rand.New(rand.NewPCG(2, uint64(time.Now().UnixNano())))
		for ctx.Err() == nil {
			time.Sleep(time.Duration(50+rng.IntN(350)) * time.Millisecond)
			n := e.nodes[rng.IntN(len(e.nodes))]
			before := lkgRevision(ctx, n, false)
			n.Checkpointd.Kill()
			target, exists := n.Target()
			if err := n.Checkpointd.Restart(); err != nil {
				mu.Lock()
				problems = append(problems, fmt.Sprintf("restart %s: %v", n.Name, err))
				mu.Unlock()
				return
			}
			after := lkgRevision(ctx, n, true)
			mu.Lock()
			kills++
			if exists && !payloads[target] {
				problems = append(problems, fmt.Sprintf("kill %d on %s: target file is not a whole config (%d bytes)", kills, n.Name, len(target)))
			}
			if after < before && ctx.Err() == nil {
				problems = append(problems, fmt.Sprintf("kill %d on %s: last-known-good went back from revision %d to %d", kills, n.Name, before, after))
			}
			mu.Unlock()
		}
	}()

	version := 0
	var cm *corev1.ConfigMap
	for {
		mu.Lock()
		done, bad := kills >= wantKills && version >= 3, len(problems) > 0
		mu.Unlock()
		if done || bad {
			break
		}
		version++
		mu.Lock()
		payloads[rolloutPayload(version)] = true
		mu.Unlock()
		cm = e.configMap("cfg", map[string]string{"config.yaml": rolloutPayload(version)})
		for _, n := range e.nodes {
			e.waitNode(n.Name, 90*time.Second, fmt.Sprintf("version %d promoted under kills", version), func(st corev1.NodeConfigStatus, c *corev1.NodeCondition) bool {
				return rv(st.LastKnownGood) == cm.ResourceVersion && rv(st.Active) == cm.ResourceVersion
			})
		}
	}
	stop()
	<-killerDone
	if len(problems) > 0 {
		t.Fatalf("%d problems, first: %s", len(problems), problems[0])
	}
	for _, n := range e.nodes {
		e.waitNode(n.Name, 30*time.Second, "last version promoted", func(st corev1.NodeConfigStatus, c *corev1.NodeCondition) bool {
			return rv(st.LastKnownGood) == cm.ResourceVersion && reasonIs(c, "Active")
		})
		if got, _ := n.Target(); got != rolloutPayload(version) {
			t.Fatalf("node %s target after the rollouts: %d bytes, want version %d", n.Name, len(got), version)
		}
	}
	t.Logf("%d checkpointd SIGKILLs survived across %d rollouts to %d nodes", kills, version, len(e.nodes))
}

// lkgRevision is the node's last-known-good ConfigMap revision as its store
// says (0 if none). Without wait, a checkpointd that does not answer at once
// gives 0; with wait it is asked until it answers (the first call may land
// on the killed process's dead connection).
func lkgRevision(ctx context.Context, n *sim.Node, wait bool) int {
	ask := func() (int, error) {
		ctx, cancel := context.WithTimeout(ctx, time.Second)
		defer cancel()
		resp, err := n.Checkpoint().GetRecords(ctx, &nodeconfigv1.GetRecordsRequest{}, grpc.WaitForReady(wait))
		if err != nil {
			return 0, err
		}
		v, _ := strconv.Atoi(resp.GetRecords().GetLastKnownGood().GetSource().GetResourceVersion())
		return v, nil
	}
	if !wait {
		v, _ := ask()
		return v
	}
	var v int
	_ = proc.WaitFor(20*time.Second, func() (bool, error) {
		var err error
		v, err = ask()
		return err == nil, nil
	})
	return v
}
