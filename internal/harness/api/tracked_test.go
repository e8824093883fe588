package api

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestNoBuildOutputIsTracked: no file git tracks is a built program (an ELF, Mach-O or PE executable):
// every clone would carry it, and it would go stale beside the code it was built from.
func TestNoBuildOutputIsTracked(t *testing.T) {
	t.Parallel()
	root := filepath.Join("..", "..", "..")
	out, err := exec.Command("git", "-C", root, "ls-files", "-z").Output()
	if err != nil {
		t.Skipf("not in a git checkout: %v", err)
	}
	magics := [][]byte{{0x7f, 'E', 'L', 'F'}, {0xcf, 0xfa, 0xed, 0xfe}, {0xfe, 0xed, 0xfa, 0xcf}, {'M', 'Z'}}
	var built []string
	for _, name := range strings.Split(strings.TrimRight(string(out), "\x00"), "\x00") {
		f, err := os.Open(filepath.Join(root, name))
		if err != nil {
			continue // deleted in the work tree
		}
		head := make([]byte, 4)
		n, _ := f.Read(head)
		_ = f.Close()
		for _, m := range magics {
			if n >= len(m) && bytes.Equal(head[:len(m)], m) {
				built = append(built, name)
			}
		}
	}
	require.Empty(t, built, "built programs are tracked: git rm --cached them and list them in .gitignore")
}
