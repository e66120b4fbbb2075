package kubeletcheck

import (
	"fmt"
	"strconv"
	"strings"
	"time"

	"k8s.io/apimachinery/pkg/api/resource"
	kubeletconfig "k8s.io/kubernetes/pkg/kubelet/apis/config"
	evictionapi "k8s.io/kubernetes/pkg/kubelet/eviction/api"
)

// evictionThresholds refuses the eviction settings the kubelet refuses when
// it builds its eviction manager, right after start. The kubelet's parser
// lives in the package of the eviction manager itself, which brings the
// whole container manager (cAdvisor, runc's cgroups) with it: the agent
// checks the same grammar against the kubelet's own table of signals.
func evictionThresholds(kc *kubeletconfig.KubeletConfiguration) error {
	for field, m := range map[string]map[string]string{"evictionHard": kc.EvictionHard, "evictionSoft": kc.EvictionSoft} {
		for signal, value := range m {
			if err := threshold(signal, value); err != nil {
				return fmt.Errorf("invalid configuration: %s[%s]: %w", field, signal, err)
			}
		}
	}
	for signal := range kc.EvictionSoft {
		if _, ok := kc.EvictionSoftGracePeriod[signal]; !ok {
			return fmt.Errorf("invalid configuration: grace period must be specified for the soft eviction threshold %s", signal)
		}
	}
	for signal, value := range kc.EvictionSoftGracePeriod {
		if err := knownSignal(signal); err != nil {
			return fmt.Errorf("invalid configuration: evictionSoftGracePeriod: %w", err)
		}
		if d, err := time.ParseDuration(value); err != nil || d < 0 {
			return fmt.Errorf("invalid configuration: evictionSoftGracePeriod[%s] %q is not a duration of zero or more", signal, value)
		}
	}
	for signal, value := range kc.EvictionMinimumReclaim {
		if err := threshold(signal, value); err != nil {
			return fmt.Errorf("invalid configuration: evictionMinimumReclaim[%s]: %w", signal, err)
		}
	}
	return nil
}

func knownSignal(signal string) error {
	if _, ok := evictionapi.OpForSignal[evictionapi.Signal(signal)]; !ok {
		return fmt.Errorf("unsupported eviction signal %s", signal)
	}
	return nil
}

// threshold is a percentage from 0 % to 100 %, or a positive quantity.
func threshold(signal, value string) error {
	if err := knownSignal(signal); err != nil {
		return err
	}
	if p, ok := strings.CutSuffix(value, "%"); ok {
		f, err := strconv.ParseFloat(p, 32)
		if err != nil || f < 0 || f > 100 {
			return fmt.Errorf("%q is not a percentage from 0%% to 100%%", value)
		}
		return nil
	}
	q, err := resource.ParseQuantity(value)
	if err != nil {
		return fmt.Errorf("%q: %w", value, err)
	}
	if q.Sign() <= 0 {
		return fmt.Errorf("%q must be positive", value)
	}
	return nil
}
