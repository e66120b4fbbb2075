// Package kubeletcheck judges a kubelet drop-in the way the kubelet judges
// its configuration at start: the kubelet's own decoder, its drop-in merge
// (every *.conf file under --config-dir in lexical order, merged as a JSON
// merge patch over the --config file) and its own validation, with the
// feature gates the merged configuration sets. What it accepts the kubelet
// starts on; what it refuses, the kubelet would exit 1 on.
package kubeletcheck

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"sync"

	jsonpatch "gopkg.in/evanphx/json-patch.v4"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/serializer"
	"k8s.io/apimachinery/pkg/util/validation/field"
	utilfeature "k8s.io/apiserver/pkg/util/feature"
	logsapi "k8s.io/component-base/logs/api/v1"
	kubeletv1beta1 "k8s.io/kubelet/config/v1beta1"
	_ "k8s.io/kubernetes/pkg/features" // registers the kubelet's feature gates
	kubeletconfig "k8s.io/kubernetes/pkg/kubelet/apis/config"
	kubeletscheme "k8s.io/kubernetes/pkg/kubelet/apis/config/scheme"
	configv1beta1 "k8s.io/kubernetes/pkg/kubelet/apis/config/v1beta1"
	"k8s.io/kubernetes/pkg/kubelet/apis/config/validation"
	"k8s.io/kubernetes/pkg/kubelet/kubeletconfig/util/codec"
	netutils "k8s.io/utils/net"
)

// NodeFilesError is a file of the node's own (its --config file, another
// drop-in) that cannot be read: a fault of the node, not of the candidate.
type NodeFilesError struct{ Err error }

func (e *NodeFilesError) Error() string { return e.Err.Error() }
func (e *NodeFilesError) Unwrap() error { return e.Err }

// dropInExtension is the only ending the kubelet reads in --config-dir.
const dropInExtension = ".conf"

// NodeFiles is where one node's kubelet reads its configuration.
type NodeFiles struct {
	// BaseConfig is the kubelet's --config file; empty means the kubelet
	// runs on its defaults.
	BaseConfig string
	// DropInDir is the kubelet's --config-dir.
	DropInDir string
	// Own is the drop-in nodeconfig writes (a path inside DropInDir): the
	// candidate stands in its place, whatever is there now.
	Own string

	// hostless leaves out what depends on the host this runs on.
	hostless bool
}

// Effective is the configuration a kubelet would start with.
type Effective struct {
	// Config is the merged configuration, defaulted as the kubelet does.
	Config *kubeletconfig.KubeletConfiguration
	// Files are the files it was merged from, in the kubelet's order; the
	// candidate is named by Own.
	Files []string
}

// YAML renders the effective configuration as a v1beta1 file, the form a
// person reads and diffs.
func (e *Effective) YAML() ([]byte, error) {
	return codec.EncodeKubeletConfig(e.Config, kubeletv1beta1.SchemeGroupVersion)
}

// Check judges a drop-in on its own, over the kubelet's defaults: what can
// be known of it before any node's files are seen. Whether the host runs
// cgroup v1 is the node's fact, not this process's: its agent judges that.
func Check(ctx context.Context, dropIn []byte) error {
	_, err := NodeFiles{Own: "candidate" + dropInExtension, hostless: true}.Effective(ctx, dropIn)
	return err
}

// Effective merges the node's files with candidate in the place of Own (nil
// candidate: as if Own were absent) and validates the result as the kubelet
// does at start. Its error is the kubelet's own words.
func (n NodeFiles) Effective(ctx context.Context, candidate []byte) (eff *Effective, err error) {
	// The kubelet's defaulting panics on a feature gate it does not know
	// (the kubelet dies of it): here that is a refusal like any other.
	defer func() {
		if r := recover(); r != nil {
			eff, err = nil, fmt.Errorf("the kubelet would stop: %v", r)
		}
	}()
	k, err := kubeletScheme()
	if err != nil {
		return nil, err
	}
	codecs := k.codecs
	base, err := n.base(ctx, k)
	if err != nil {
		return nil, err
	}
	files, err := n.dropIns(candidate != nil)
	if err != nil {
		return nil, &NodeFilesError{Err: err}
	}
	merged, err := merge(base, files, n.Own, func(path string) ([]byte, error) {
		if path == n.Own {
			return candidate, nil
		}
		return os.ReadFile(path)
	}, codecs)
	if err != nil {
		return nil, err
	}
	if n.hostless {
		merged.FailCgroupV1 = false
	}
	if err := validate(merged); err != nil {
		return nil, err
	}
	return &Effective{Config: merged, Files: append(baseFiles(n.BaseConfig), files...)}, nil
}

func baseFiles(base string) []string {
	if base == "" {
		return nil
	}
	return []string{base}
}

// base is the --config file decoded by the kubelet's decoder (strict, then
// lenient with a warning, defaulted), its relative paths made absolute
// against its directory; or the kubelet's defaults without one.
func (n NodeFiles) base(ctx context.Context, k *scheme) (*kubeletconfig.KubeletConfiguration, error) {
	if n.BaseConfig == "" {
		return k.defaults()
	}
	data, err := os.ReadFile(n.BaseConfig)
	if err != nil {
		return nil, &NodeFilesError{Err: fmt.Errorf("read the kubelet's config file: %w", err)}
	}
	// A base the kubelet's decoder refuses (half written, mistyped) is the
	// node's own fault, whatever the candidate.
	if len(data) == 0 {
		return nil, &NodeFilesError{Err: fmt.Errorf("kubelet config file %q was empty", n.BaseConfig)}
	}
	kc, err := codec.DecodeKubeletConfiguration(ctx, k.codecs, data)
	if err != nil {
		return nil, &NodeFilesError{Err: fmt.Errorf("kubelet config file %s: %w", n.BaseConfig, err)}
	}
	root := filepath.Dir(n.BaseConfig)
	for _, p := range kubeletconfig.KubeletConfigurationPathRefs(kc) {
		if *p != "" && !filepath.IsAbs(*p) {
			*p = filepath.Join(root, *p)
		}
	}
	return kc, nil
}

// scheme is the kubelet's config scheme and its strict codecs.
type scheme struct {
	scheme *runtime.Scheme
	codecs *serializer.CodecFactory
}

// kubeletScheme is built once: it is the same for every check.
var kubeletScheme = sync.OnceValues(func() (*scheme, error) {
	s, codecs, err := kubeletscheme.NewSchemeAndCodecs(serializer.EnableStrict)
	return &scheme{scheme: s, codecs: codecs}, err
})

// defaults is what a config file with only apiVersion and kind gives.
func (k *scheme) defaults() (*kubeletconfig.KubeletConfiguration, error) {
	versioned := &kubeletv1beta1.KubeletConfiguration{}
	k.scheme.Default(versioned)
	kc := &kubeletconfig.KubeletConfiguration{}
	if err := k.scheme.Convert(versioned, kc, nil); err != nil {
		return nil, err
	}
	return kc, nil
}

// dropIns lists the *.conf files under DropInDir in the kubelet's order
// (a lexical walk, subdirectories included), with Own where it sorts when
// the candidate stands in for it, and without it otherwise.
func (n NodeFiles) dropIns(withOwn bool) ([]string, error) {
	var files []string
	if n.DropInDir != "" {
		err := filepath.WalkDir(n.DropInDir, func(path string, d fs.DirEntry, err error) error {
			if err != nil {
				return err
			}
			if d.IsDir() || filepath.Ext(d.Name()) != dropInExtension || path == n.Own {
				return nil
			}
			files = append(files, path)
			return nil
		})
		if err != nil && !errors.Is(err, fs.ErrNotExist) {
			return nil, fmt.Errorf("read the kubelet's drop-in directory: %w", err)
		}
	}
	if withOwn {
		files = append(files, n.Own)
		slices.SortFunc(files, walkOrder)
	}
	return files, nil
}

// walkOrder is filepath.WalkDir's order: lexical by path element, so that
// "a/b.conf" comes before "a.conf/x.conf" as a walk would find them.
func walkOrder(a, b string) int {
	return slices.Compare(splitPath(a), splitPath(b))
}

func splitPath(p string) []string {
	var parts []string
	for p != "" && p != "/" && p != "." {
		dir, file := filepath.Split(filepath.Clean(p))
		parts = append(parts, file)
		p = dir
	}
	slices.Reverse(parts)
	return parts
}

// merge applies each drop-in, decoded by the kubelet's decoder, as a JSON
// merge patch over the versioned base, then defaults and converts back. A
// drop-in other than own that cannot be read or decoded is a NodeFilesError.
func merge(base *kubeletconfig.KubeletConfiguration, files []string, own string, read func(string) ([]byte, error), codecs *serializer.CodecFactory) (*kubeletconfig.KubeletConfiguration, error) {
	versioned := &kubeletv1beta1.KubeletConfiguration{}
	if err := configv1beta1.Convert_config_KubeletConfiguration_To_v1beta1_KubeletConfiguration(base, versioned, nil); err != nil {
		return nil, err
	}
	doc, err := json.Marshal(versioned)
	if err != nil {
		return nil, err
	}
	for _, path := range files {
		patch, err := decodeDropIn(path, read, codecs)
		if err != nil {
			if path != own {
				err = &NodeFilesError{Err: err}
			}
			return nil, err
		}
		if doc, err = jsonpatch.MergePatch(doc, patch); err != nil {
			return nil, fmt.Errorf("drop-in %s: merge: %w", path, err)
		}
	}
	versioned = &kubeletv1beta1.KubeletConfiguration{}
	if err := json.Unmarshal(doc, versioned); err != nil {
		return nil, fmt.Errorf("the merged configuration: %w", err)
	}
	if err := utilfeature.DefaultMutableFeatureGate.DeepCopy().SetFromMap(versioned.FeatureGates); err != nil {
		return nil, fmt.Errorf("featureGates: %w", err)
	}
	configv1beta1.SetDefaults_KubeletConfiguration(versioned)
	merged := &kubeletconfig.KubeletConfiguration{}
	if err := configv1beta1.Convert_v1beta1_KubeletConfiguration_To_config_KubeletConfiguration(versioned, merged, nil); err != nil {
		return nil, err
	}
	return merged, nil
}

// decodeDropIn reads one drop-in and decodes it, as the kubelet does, into
// the JSON merge patch it applies.
func decodeDropIn(path string, read func(string) ([]byte, error), codecs *serializer.CodecFactory) ([]byte, error) {
	data, err := read(path)
	if err != nil {
		return nil, fmt.Errorf("drop-in %s: %w", path, err)
	}
	if len(data) == 0 {
		return nil, fmt.Errorf("drop-in %s: kubelet config file was empty", path)
	}
	patch, gvk, err := codec.DecodeKubeletConfigurationIntoJSON(codecs, data)
	if err != nil {
		return nil, fmt.Errorf("drop-in %s: %w", path, err)
	}
	if gvk == nil || gvk.Empty() {
		return nil, fmt.Errorf("drop-in %s: no apiVersion/kind", path)
	}
	if *gvk != kubeletv1beta1.SchemeGroupVersion.WithKind("KubeletConfiguration") {
		return nil, fmt.Errorf("drop-in %s: unknown apiVersion/kind: %v", path, gvk)
	}
	return patch, nil
}

// validate runs what the kubelet runs before it starts anything: its
// feature gates from the configuration, its logging validation, its
// configuration validation, and its eviction thresholds.
func validate(kc *kubeletconfig.KubeletConfiguration) error {
	gates := utilfeature.DefaultMutableFeatureGate.DeepCopy()
	if err := gates.SetFromMap(kc.FeatureGates); err != nil {
		return fmt.Errorf("featureGates: %w", err)
	}
	if errs := logsapi.Validate(&kc.Logging, gates, field.NewPath("logging")); len(errs) > 0 {
		return errs.ToAggregate()
	}
	if err := validation.ValidateKubeletConfiguration(kc, gates); err != nil {
		return err
	}
	if err := evictionThresholds(kc); err != nil {
		return err
	}
	return clusterDNS(kc)
}

// clusterDNS refuses what the kubelet only logs: it drops an entry that is
// not an IP address and starts, and its pods lose that name server.
func clusterDNS(kc *kubeletconfig.KubeletConfiguration) error {
	for i, ip := range kc.ClusterDNS {
		if netutils.ParseIPSloppy(ip) == nil {
			return fmt.Errorf("invalid configuration: clusterDNS[%d] %q is not an IP address (the kubelet would start without it, and pods would lose that name server)", i, ip)
		}
	}
	return nil
}
