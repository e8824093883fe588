// Package systemd holds inorder's systemd unit (inorder.service); its test has systemd check it.
package systemd_test

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestTheUnitVerifies runs systemd-analyze verify on the unit, where the machine has it: no unknown key,
// no error. The binary it starts is not installed here, so a copy of the unit starts /bin/true instead.
func TestTheUnitVerifies(t *testing.T) {
	t.Parallel()
	analyze, err := exec.LookPath("systemd-analyze")
	if err != nil {
		t.Skip("systemd-analyze is not installed")
	}
	unit, err := os.ReadFile("inorder.service")
	require.NoError(t, err)
	require.Contains(t, string(unit), "ExecStart=/usr/local/bin/inorder run --config /etc/inorder/inorder.yaml")
	copyPath := filepath.Join(t.TempDir(), "inorder.service")
	require.NoError(t, os.WriteFile(copyPath,
		[]byte(strings.Replace(string(unit), "/usr/local/bin/inorder", "/bin/true", 1)), 0o644))
	out, err := exec.Command(analyze, "verify", copyPath).CombinedOutput()
	require.NoError(t, err, "%s", out)
	require.Empty(t, strings.TrimSpace(string(out)), "systemd has nothing to say of the unit")
}

// TestAConfigurationErrorIsNotRestarted reads the unit's [Service] section: it restarts on a failure,
// which a lost database or a crash is, but not on exit status 2, inorder's configuration error, which
// the same command line would meet again.
func TestAConfigurationErrorIsNotRestarted(t *testing.T) {
	t.Parallel()
	unit, err := os.ReadFile("inorder.service")
	require.NoError(t, err)
	service := map[string]string{}
	section := ""
	for _, line := range strings.Split(string(unit), "\n") {
		line = strings.TrimSpace(line)
		switch {
		case line == "" || strings.HasPrefix(line, "#"):
		case strings.HasPrefix(line, "["):
			section = line
		case section == "[Service]":
			k, v, ok := strings.Cut(line, "=")
			require.True(t, ok, line)
			service[k] = v
		}
	}
	require.Equal(t, "on-failure", service["Restart"])
	require.Equal(t, "2", service["RestartPreventExitStatus"])
}
