// Package helmrender renders a Helm chart with Helm's own library, as
// 'helm template' does, into the objects it would install: its templates'
// and its CRDs'.
package helmrender

import (
	"path"
	"sort"
	"strings"

	"helm.sh/helm/v3/pkg/chart"
	"helm.sh/helm/v3/pkg/chart/loader"
	"helm.sh/helm/v3/pkg/chartutil"
	"helm.sh/helm/v3/pkg/engine"
)

// Load reads a chart from its directory or its package (.tgz).
func Load(p string) (*chart.Chart, error) { return loader.Load(p) }

// Render renders c for a release named release in namespace ns with vals
// over its default values, and returns the YAML of its CRDs and templates,
// the CRDs first, the templates in name order.
func Render(c *chart.Chart, release, ns string, vals map[string]any) ([]byte, error) {
	rv, err := chartutil.ToRenderValues(c, vals, chartutil.ReleaseOptions{Name: release, Namespace: ns, Revision: 1, IsInstall: true}, chartutil.DefaultCapabilities)
	if err != nil {
		return nil, err
	}
	files, err := engine.Render(c, rv)
	if err != nil {
		return nil, err
	}
	var out strings.Builder
	for _, crd := range c.CRDObjects() {
		out.Write(crd.File.Data)
		out.WriteString("\n---\n")
	}
	var names []string
	for name := range files {
		if path.Ext(name) == ".yaml" {
			names = append(names, name)
		}
	}
	sort.Strings(names)
	for _, name := range names {
		out.WriteString(files[name])
		out.WriteString("\n---\n")
	}
	return []byte(out.String()), nil
}
