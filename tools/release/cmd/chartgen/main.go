// Command chartgen writes the Helm chart of the install, generated from
// deploy/ (package chart), or with -check fails when the committed chart
// differs from what deploy/ generates now.
package main

import (
	"flag"
	"fmt"
	"os"
	"strings"

	"nodeconfig.io/tools/release/chart"
)

func main() {
	deploy := flag.String("deploy", "deploy", "the kustomize base")
	out := flag.String("out", "deploy/helm/nodeconfig", "the chart's directory")
	check := flag.Bool("check", false, "only compare the chart in -out with what -deploy generates")
	flag.Parse()
	if err := run(*deploy, *out, *check); err != nil {
		fmt.Fprintln(os.Stderr, "chartgen:", err)
		os.Exit(1)
	}
}

func run(deploy, out string, check bool) error {
	files, err := chart.Generate(deploy)
	if err != nil {
		return err
	}
	if !check {
		return chart.Write(out, files)
	}
	stale, err := chart.Stale(out, files)
	if err != nil {
		return err
	}
	if len(stale) > 0 {
		return fmt.Errorf("%s is stale: run 'make chart' and commit the result\n  %s", out, strings.Join(stale, "\n  "))
	}
	return nil
}
