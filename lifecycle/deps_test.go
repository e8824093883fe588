package lifecycle_test

import (
	"errors"
	"os/exec"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestLifecycleImportsNeitherPrometheusNorPgxpool guards the split with package ops: a program that runs
// processors in a Group but serves no metrics must not link Prometheus or a connection pool.
func TestLifecycleImportsNeitherPrometheusNorPgxpool(t *testing.T) {
	t.Parallel()
	goTool, err := exec.LookPath("go")
	if err != nil {
		t.Skip("the go tool is not on PATH:", err)
	}
	// The test runs in the package's directory; -deps lists every package it imports, directly or not
	// (its tests' imports excluded).
	out, err := exec.Command(goTool, "list", "-deps", ".").Output()
	var exitErr *exec.ExitError
	if errors.As(err, &exitErr) {
		t.Fatalf("go list -deps: %v\n%s", err, exitErr.Stderr)
	}
	require.NoError(t, err)
	forbidden := []string{"github.com/prometheus/", "github.com/jackc/pgx/v5/pgxpool"}
	deps := strings.Fields(string(out))
	require.Contains(t, deps, "github.com/inorder-dev/inorder/lifecycle", "go list listed the package itself")
	for _, dep := range deps {
		for _, f := range forbidden {
			if strings.HasPrefix(dep, f) {
				t.Errorf("package lifecycle depends on %s; metrics, health and the lag poller belong in package ops", dep)
			}
		}
	}
}
