// Command chartgen writes the Helm chart of the install, generated from
// deploy/ (package chart).
package main

import (
	"flag"
	"fmt"
	"os"

	"nodeconfig.io/tools/release/chart"
)

func main() {
	deploy := flag.String("deploy", "deploy", "the kustomize base")
	out := flag.String("out", "deploy/helm/nodeconfig", "the chart's directory")
	flag.Parse()
	files, err := chart.Generate(*deploy)
	if err == nil {
		err = chart.Write(*out, files)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "chartgen:", err)
		os.Exit(1)
	}
}
