package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os/exec"
	"reflect"
	"slices"
	"strings"
	"time"

	"sigs.k8s.io/yaml"

	"nodeconfig.io/test/framework/proc"
)

// screenLines is a screen: what `status` prints by default must fit in it
// whatever the fleet's size.
const screenLines = 50

// pluginRuns is how many times each command runs: every run is a new
// process, as an operator's is, so each time is a cold start.
const pluginRuns = 5

// checkPlugin, with -plugin, runs the built kubectl plugin against the
// settled fleet as an operator would, through the API server and the
// reconciler's gRPC API: `status` must fit a screen and count every node,
// and -o yaml must hold what -o json does and list every node. The time
// each command takes is a figure, printed, not a condition.
func (r *fleetRun) checkPlugin() error {
	if !r.o.plugin {
		return nil
	}
	bin, err := proc.Binary("kubectl-nodeconfig")
	if err != nil {
		return err
	}
	status := func(args ...string) (string, []time.Duration, error) {
		args = append([]string{"status", "--kubeconfig", r.c.Kubeconfig, "--reconciler", r.reconcilerAddr}, args...)
		var out string
		var times []time.Duration
		for range pluginRuns {
			var stdout, stderr bytes.Buffer
			cmd := exec.CommandContext(r.ctx, bin, args...)
			cmd.Stdout, cmd.Stderr = &stdout, &stderr
			t0 := time.Now()
			if err := cmd.Run(); err != nil {
				return "", nil, fmt.Errorf("kubectl nodeconfig %s: %w: %s", strings.Join(args, " "), err, stderr.String())
			}
			times = append(times, time.Since(t0))
			out = stdout.String()
		}
		return out, times, nil
	}
	text, textTimes, err := status()
	if err != nil {
		return err
	}
	fmt.Printf("  kubectl nodeconfig status (%d lines; %s):\n", strings.Count(text, "\n"), timesText(textTimes))
	for _, l := range strings.SplitAfter(text, "\n") {
		if l != "" {
			fmt.Print("    | " + l)
		}
	}
	if n := strings.Count(text, "\n"); n > screenLines {
		return fmt.Errorf("kubectl nodeconfig status of %d nodes prints %d lines, more than a screen (%d)", r.n, n, screenLines)
	}
	if want := fmt.Sprintf("Active %d", r.sel); !strings.Contains(text, want) {
		return fmt.Errorf("kubectl nodeconfig status does not count %q: every selected node is active", want)
	}

	js, jsonTimes, err := status("-o", "json")
	if err != nil {
		return err
	}
	ym, yamlTimes, err := status("-o", "yaml")
	if err != nil {
		return err
	}
	fmt.Printf("  kubectl nodeconfig status -o json (%d bytes; %s)\n", len(js), timesText(jsonTimes))
	fmt.Printf("  kubectl nodeconfig status -o yaml (%d bytes; %s)\n", len(ym), timesText(yamlTimes))
	var fromJSON, fromYAML map[string]any
	if err := json.Unmarshal([]byte(js), &fromJSON); err != nil {
		return fmt.Errorf("kubectl nodeconfig status -o json: %w", err)
	}
	if err := yaml.Unmarshal([]byte(ym), &fromYAML); err != nil {
		return fmt.Errorf("kubectl nodeconfig status -o yaml: %w", err)
	}
	if !reflect.DeepEqual(fromJSON, fromYAML) {
		return fmt.Errorf("kubectl nodeconfig status: -o yaml does not hold what -o json does")
	}
	var doc struct {
		NodeConfigs []struct {
			Nodes []struct {
				Outcome string `json:"outcome"`
			} `json:"nodes"`
		} `json:"nodeConfigs"`
	}
	if err := yaml.Unmarshal([]byte(ym), &doc); err != nil {
		return fmt.Errorf("kubectl nodeconfig status -o yaml: %w", err)
	}
	if len(doc.NodeConfigs) != 1 || len(doc.NodeConfigs[0].Nodes) != r.sel {
		return fmt.Errorf("kubectl nodeconfig status -o yaml: want the fleet's NodeConfig with its %d nodes", r.sel)
	}
	fmt.Printf("  -o yaml round-trips: it decodes to what -o json does, the NodeConfig and its %d nodes\n", r.sel)
	return nil
}

// timesText is a command's times: the median and the range.
func timesText(ts []time.Duration) string {
	s := slices.Clone(ts)
	slices.Sort(s)
	round := func(d time.Duration) time.Duration { return d.Round(time.Millisecond) }
	return fmt.Sprintf("median %v of %d runs, %v to %v", round(s[len(s)/2]), len(s), round(s[0]), round(s[len(s)-1]))
}
