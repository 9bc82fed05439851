// Command featuregates prints the feature gates kube-scheduler registers (its defaults at this
// module's pinned release, whether each is locked, its stage and what it depends on) as JSON.
// scripts/gen-feature-gates turns the output into operator/kopf_scheduler/config/feature_gates_data.py.
// Not part of kcp: `go build ./cmd/kcp` does not build it, and the kcp cache key does not cover it.
package main

import (
	"encoding/json"
	"os"
	"sort"

	utilfeature "k8s.io/apiserver/pkg/util/feature"
	logsapi "k8s.io/component-base/logs/api/v1"
	metricsfeatures "k8s.io/component-base/metrics/features"
	_ "k8s.io/kubernetes/pkg/features" // registers the Kubernetes gates on the default gate
)

type gate struct {
	Name       string   `json:"name"`
	Default    bool     `json:"default"`
	Locked     bool     `json:"locked"`
	PreRelease string   `json:"preRelease"`
	DependsOn  []string `json:"dependsOn,omitempty"`
}

func main() {
	// The same registrations as cmd/kube-scheduler/app/server.go's init.
	fg := utilfeature.DefaultMutableFeatureGate
	if err := logsapi.AddFeatureGates(fg); err != nil {
		panic(err)
	}
	if err := metricsfeatures.AddFeatureGates(fg); err != nil {
		panic(err)
	}
	deps := fg.Dependencies()
	var out []gate
	for name, spec := range fg.GetAll() {
		g := gate{Name: string(name), Default: spec.Default, Locked: spec.LockToDefault, PreRelease: string(spec.PreRelease)}
		for _, d := range deps[name] {
			g.DependsOn = append(g.DependsOn, string(d))
		}
		sort.Strings(g.DependsOn)
		out = append(out, g)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	enc := json.NewEncoder(os.Stdout)
	enc.SetIndent("", " ")
	if err := enc.Encode(out); err != nil {
		panic(err)
	}
}
