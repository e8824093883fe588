package fault

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"testing"

	"github.com/inorder-dev/inorder/internal/harness/pgtest"
)

// full is the long form of the suite, which `make faults` asks for; the default is the short form that
// `make test` runs.
var full = os.Getenv("INORDER_FAULTS") == "full"

// pick returns short in the short form and long in the full one.
func pick[T any](short, long T) T {
	if full {
		return long
	}
	return short
}

// binary is the inorder binary under test, built once by TestMain.
var binary string

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "inorder-fault-bin-")
	if err != nil {
		fmt.Fprintln(os.Stderr, "fault:", err)
		os.Exit(1)
	}
	code := func() int {
		defer os.RemoveAll(dir)
		if err := build(dir); err != nil {
			fmt.Fprintln(os.Stderr, "fault:", err)
			return 1
		}
		code := m.Run()
		// What pgtest.Main does after m.Run.
		if c := pgtest.Cluster(); c != nil {
			_ = c.Stop()
		}
		return code
	}()
	os.Exit(code)
}

// build compiles ./cmd/inorder from the module root into dir. The full form builds it with the race
// detector, so that a data race in the library under faults fails the suite too.
func build(dir string) error {
	root, err := filepath.Abs(filepath.Join("..", "..", ".."))
	if err != nil {
		return err
	}
	if _, err := os.Stat(filepath.Join(root, "go.mod")); err != nil {
		return fmt.Errorf("module root not found three levels above the package: %w", err)
	}
	binary = filepath.Join(dir, "inorder")
	args := []string{"build", "-o", binary}
	if full {
		args = append(args, "-race")
	}
	cmd := exec.Command("go", append(args, "./cmd/inorder")...)
	cmd.Dir = root
	if out, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("build inorder: %v\n%s", err, out)
	}
	return nil
}
