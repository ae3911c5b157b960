package packaging

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
)

// OperatorModule is the Prometheus Operator release whose published CRD
// manifests (example/prometheus-operator-crd in its Go module) the tests
// install: the module proxy is a source CI can reach, and `go mod download`
// checks the files against the checksum database.
const OperatorModule = "github.com/prometheus-operator/prometheus-operator@v0.85.0"

// OperatorCRDs returns the CustomResourceDefinitions of PodMonitor,
// ServiceMonitor and PrometheusRule from OperatorModule, downloaded into
// the Go module cache on first use.
func OperatorCRDs(ctx context.Context) (Objects, error) {
	var stdout, stderr bytes.Buffer
	cmd := exec.CommandContext(ctx, "go", "mod", "download", "-json", OperatorModule)
	// Outside any module, so this repository's go.mod is neither read nor changed.
	cmd.Dir = os.TempDir()
	cmd.Env = append(os.Environ(), "GO111MODULE=on", "GOFLAGS=-mod=mod")
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		return nil, fmt.Errorf("go mod download %s: %w: %s%s", OperatorModule, err, stderr.String(), stdout.String())
	}
	var info struct{ Dir, Error string }
	if err := json.Unmarshal(stdout.Bytes(), &info); err != nil {
		return nil, fmt.Errorf("go mod download %s: %w", OperatorModule, err)
	}
	if info.Error != "" || info.Dir == "" {
		return nil, fmt.Errorf("go mod download %s: %s", OperatorModule, info.Error)
	}
	var all Objects
	for _, kind := range []string{"podmonitors", "servicemonitors", "prometheusrules"} {
		b, err := os.ReadFile(filepath.Join(info.Dir, "example", "prometheus-operator-crd", "monitoring.coreos.com_"+kind+".yaml"))
		if err != nil {
			return nil, err
		}
		objs, err := Decode(b)
		if err != nil {
			return nil, err
		}
		all = append(all, objs...)
	}
	return all, nil
}
