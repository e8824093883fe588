package main

import (
	"crypto/x509"
	"encoding/pem"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// publicChainChild, set in a test process's environment, makes it the child of
// TestAPublicCAsChainVerifiesWithNoSystemCertificates: TestMain then runs the tests asked for and nothing
// else (no binary, no database).
const publicChainChild = "INORDER_TEST_PUBLIC_CHAIN_CHILD"

// TestAPublicCAsChainVerifiesWithNoSystemCertificates runs this package's test binary, which holds what
// the inorder binary holds, as inorder's image runs it: with no certificate file or directory to load
// (SSL_CERT_FILE and SSL_CERT_DIR point at nothing, and Go reads no other place when they are set). In that
// process a real chain, www.google.com's certificate and its intermediate as served in 2023, verifies as
// of then to GTS Root R1 with the roots Go picks itself: those compiled into the binary. A process loads
// its system roots once, so the check runs in a process of its own.
func TestAPublicCAsChainVerifiesWithNoSystemCertificates(t *testing.T) {
	t.Parallel()
	if os.Getenv(publicChainChild) != "" {
		t.Skip("the parent, not run in its own child")
	}
	cmd := exec.Command(os.Args[0], "-test.run=^TestPublicChainChild$", "-test.v", "-test.count=1")
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "SSL_CERT_") && !strings.HasPrefix(kv, "GODEBUG=") {
			cmd.Env = append(cmd.Env, kv)
		}
	}
	cmd.Env = append(cmd.Env, publicChainChild+"=1", "SSL_CERT_FILE=/nonexistent", "SSL_CERT_DIR=/nonexistent")
	out, err := cmd.CombinedOutput()
	require.NoError(t, err, "%s", out)
	require.Contains(t, string(out), "--- PASS: TestPublicChainChild", "the child ran the check: %s", out)
}

// TestPublicChainChild is the check TestAPublicCAsChainVerifiesWithNoSystemCertificates runs in a process
// of its own; run alone, it does nothing.
func TestPublicChainChild(t *testing.T) {
	t.Parallel()
	if os.Getenv(publicChainChild) == "" {
		t.Skip("run by TestAPublicCAsChainVerifiesWithNoSystemCertificates")
	}
	require.Equal(t, "/nonexistent", os.Getenv("SSL_CERT_FILE"))
	_, err := os.Stat(os.Getenv("SSL_CERT_FILE"))
	require.ErrorIs(t, err, os.ErrNotExist, "no certificate file to load")

	leaf := readCert(t, "www.google.com.pem")
	intermediates := x509.NewCertPool()
	intermediates.AddCert(readCert(t, "gts-ca-1c3.pem"))
	chains, err := leaf.Verify(x509.VerifyOptions{
		DNSName:       "www.google.com",
		Intermediates: intermediates,
		CurrentTime:   time.Unix(1677615892, 0), // 2023-02-28, while the leaf was valid
		// Roots unset: the system's, which here are the ones compiled into the binary.
	})
	require.NoError(t, err)
	require.Len(t, chains, 1)
	var names []string
	for _, c := range chains[0] {
		names = append(names, c.Subject.CommonName)
	}
	require.Equal(t, []string{"www.google.com", "GTS CA 1C3", "GTS Root R1"}, names)
}

func readCert(t *testing.T, name string) *x509.Certificate {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("testdata", "publicchain", name))
	require.NoError(t, err)
	block, _ := pem.Decode(b)
	require.NotNil(t, block, "a PEM block in %s", name)
	c, err := x509.ParseCertificate(block.Bytes)
	require.NoError(t, err)
	return c
}
