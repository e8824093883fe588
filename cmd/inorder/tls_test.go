package main

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/json"
	"encoding/pem"
	"fmt"
	"math/big"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/inorder-dev/inorder/internal/harness/pgcluster"
	"github.com/inorder-dev/inorder/migrations"
)

// tlsServer is a server of its own that takes connections over TLS only (hostssl, scram-sha-256, or a
// client certificate), with a certificate for "localhost" from a CA the test made.
type tlsServer struct {
	dir  string // ca.pem, client.pem, client.key
	port int
	// admin connects as the superuser, over TLS.
	admin *pgx.Conn
}

// url is a URL to the test's database as user on host, with extra parameters.
func (s *tlsServer) url(user, host, params string) string {
	return fmt.Sprintf("postgres://%s@%s:%d/appdb?%s", user, host, s.port, params)
}

// startTLSServer starts the server: initdb, a certificate for localhost (and no IP address) and one for a
// client named app_cert, signed by a CA made here; pg_hba.conf lets nothing in without TLS.
func startTLSServer(t *testing.T) *tlsServer {
	t.Helper()
	dir, err := os.MkdirTemp("", "inorder-tls-") // not t.TempDir, whose parent the server's user may not enter
	require.NoError(t, err)
	t.Cleanup(func() { _ = os.RemoveAll(dir) })
	cred, err := pgcluster.ServerCredential()
	require.NoError(t, err)
	ca, caKey := newCert(t, dir, "ca", "inorder test CA", nil, nil, nil)
	newCert(t, dir, "server", "localhost", []string{"localhost"}, ca, caKey)
	newCert(t, dir, "client", "app_cert", nil, ca, caKey)
	hba := filepath.Join(dir, "pg_hba.conf")
	// Only for the harness's look at the server while it starts; replaced below.
	require.NoError(t, os.WriteFile(hba, []byte("host all postgres 127.0.0.1/32 trust\n"), 0o600))
	if cred != nil { // the server runs as postgres and must read what it is given
		for _, f := range []string{dir, hba, filepath.Join(dir, "server.pem"), filepath.Join(dir, "server.key"), filepath.Join(dir, "ca.pem")} {
			require.NoError(t, os.Chown(f, int(cred.Uid), int(cred.Gid)))
		}
	}
	ctx := context.Background()
	c, err := pgcluster.Start(ctx, pgcluster.Config{Settings: map[string]string{
		"ssl": "on", "ssl_cert_file": filepath.Join(dir, "server.pem"), "ssl_key_file": filepath.Join(dir, "server.key"),
		"ssl_ca_file": filepath.Join(dir, "ca.pem"), "hba_file": hba, "max_connections": "40",
		"password_encryption": "scram-sha-256",
	}})
	if err != nil {
		t.Skipf("no server to start: %v", err)
	}
	t.Cleanup(func() { _ = c.Stop() })
	require.NoError(t, os.WriteFile(hba, []byte(`hostssl all app_cert 127.0.0.1/32 cert
hostssl all postgres 127.0.0.1/32 trust
hostssl all all 127.0.0.1/32 scram-sha-256
`), 0o600))
	s := &tlsServer{dir: dir, port: c.Port()}
	admin, err := pgx.Connect(ctx, c.URL("postgres"))
	require.NoError(t, err)
	_, err = admin.Exec(ctx, "SELECT pg_reload_conf()")
	require.NoError(t, err)
	require.NoError(t, admin.Close(ctx))
	// Once reloaded, nothing comes in without TLS.
	require.Eventually(t, func() bool {
		conn, err := pgx.Connect(ctx, c.URL("postgres"))
		if err == nil {
			_ = conn.Close(ctx)
		}
		return err != nil
	}, 10*time.Second, 10*time.Millisecond)
	s.admin, err = pgx.Connect(ctx, strings.Replace(c.URL("postgres"), "sslmode=disable", "sslmode=require", 1))
	require.NoError(t, err)
	t.Cleanup(func() { _ = s.admin.Close(context.Background()) })
	for _, q := range []string{
		"CREATE ROLE app LOGIN PASSWORD 'app-secret'", "CREATE ROLE app_cert LOGIN IN ROLE app",
		"CREATE DATABASE appdb OWNER app",
	} {
		_, err := s.admin.Exec(ctx, q)
		require.NoError(t, err, q)
	}
	return s
}

// newCert writes name.pem and name.key into dir: a CA's certificate when ca is nil, else one signed by
// ca for cn with dnsNames.
func newCert(t *testing.T, dir, name, cn string, dnsNames []string, ca *x509.Certificate, caKey *ecdsa.PrivateKey) (*x509.Certificate, *ecdsa.PrivateKey) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	require.NoError(t, err)
	serial, err := rand.Int(rand.Reader, big.NewInt(1<<62))
	require.NoError(t, err)
	tmpl := &x509.Certificate{
		SerialNumber: serial, Subject: pkix.Name{CommonName: cn}, DNSNames: dnsNames,
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(24 * time.Hour),
		KeyUsage:    x509.KeyUsageDigitalSignature,
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth},
	}
	parent, signer := tmpl, key
	if ca == nil {
		tmpl.IsCA, tmpl.BasicConstraintsValid = true, true
		tmpl.KeyUsage |= x509.KeyUsageCertSign
		tmpl.ExtKeyUsage = nil
	} else {
		parent, signer = ca, caKey
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, parent, &key.PublicKey, signer)
	require.NoError(t, err)
	cert, err := x509.ParseCertificate(der)
	require.NoError(t, err)
	keyDER, err := x509.MarshalPKCS8PrivateKey(key)
	require.NoError(t, err)
	require.NoError(t, os.WriteFile(filepath.Join(dir, name+".pem"), pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), 0o644))
	require.NoError(t, os.WriteFile(filepath.Join(dir, name+".key"), pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: keyDER}), 0o600))
	return cert, key
}

// TestTLSAsDeployed runs inorder against a server that takes TLS connections only, as it is deployed:
// verify-full against the test's CA and the host name migrates, runs (every connection of the process
// over TLS) and reads status; a URL whose host is not the certificate's name is refused in one line that
// names both; a client certificate (sslcert, sslkey) logs in without a password; and sslrootcert=system
// verifies against the system's roots, here the CA given as SSL_CERT_FILE, and is refused without it.
func TestTLSAsDeployed(t *testing.T) {
	t.Parallel()
	s := startTLSServer(t)
	ctx := context.Background()
	ca := filepath.Join(s.dir, "ca.pem")
	verified := "sslmode=verify-full&sslrootcert=" + ca
	app := []string{"DATABASE_URL=" + strings.Replace(s.url("app", "localhost", verified), "app@", "app:app-secret@", 1)}

	code, _, stderr := runBinary(t, app, "migrate")
	require.Zero(t, code, stderr)
	appConn, err := pgx.Connect(ctx, strings.TrimPrefix(app[0], "DATABASE_URL="))
	require.NoError(t, err)
	t.Cleanup(func() { _ = appConn.Close(context.Background()) })
	_, err = appConn.Exec(ctx, `CREATE TABLE bookings (id bigserial PRIMARY KEY, aggregate_id text NOT NULL,
		created_at timestamptz NOT NULL DEFAULT clock_timestamp());
		CREATE INDEX ON bookings (created_at, id);
		INSERT INTO bookings (aggregate_id) SELECT 'customer-' || g FROM generate_series(1, 5) g`)
	require.NoError(t, err)
	require.NoError(t, migrations.AddClock(ctx, appConn, "bookings", migrations.ClockOpts{}))

	p := startBinary(t, app, "run", "--process", "booking_sms", "--table", "bookings", "--columns", "id",
		"--start-from", "beginning", "--poll-interval", "20ms")
	require.Eventually(t, func() bool { return len(p.output()) == 5 }, 20*time.Second, 5*time.Millisecond, p.logs())
	var sessions, plain int
	require.NoError(t, s.admin.QueryRow(ctx, `SELECT count(*), count(*) FILTER (WHERE NOT s.ssl)
		FROM pg_stat_activity a JOIN pg_stat_ssl s USING (pid)
		WHERE a.usename = 'app' AND a.application_name LIKE 'inorder%'`).Scan(&sessions, &plain))
	require.NotZero(t, sessions)
	require.Zero(t, plain, "every connection of the process is over TLS")
	require.NoError(t, p.cmd.Process.Signal(syscall.SIGTERM))
	require.Zero(t, p.wait(t), p.logs())

	code, out, stderr := runBinary(t, app, "status", "--json")
	require.Zero(t, code, stderr)
	var rep statusDoc
	require.NoError(t, json.Unmarshal([]byte(out), &rep), out)
	require.Len(t, rep.Processes, 1)

	// The certificate names localhost, not 127.0.0.1.
	mismatch := []string{"DATABASE_URL=" + strings.Replace(s.url("app", "127.0.0.1", verified), "app@", "app:app-secret@", 1)}
	code, out, stderr = runBinary(t, mismatch, "status")
	require.Equal(t, 1, code, stderr)
	require.Empty(t, out)
	require.Contains(t, stderr, "on 127.0.0.1:"+strconv.Itoa(s.port)+": the server's certificate is for localhost, not 127.0.0.1, the host the URL names")
	require.NotContains(t, stderr, "app-secret")
	require.Equal(t, 1, strings.Count(strings.TrimSpace(stderr), "\n")+1, "one line: %q", stderr)

	// A client certificate instead of a password.
	certURL := s.url("app_cert", "localhost", verified+"&sslcert="+filepath.Join(s.dir, "client.pem")+
		"&sslkey="+filepath.Join(s.dir, "client.key"))
	code, _, stderr = runBinary(t, []string{"DATABASE_URL=" + certURL}, "status")
	require.Zero(t, code, stderr)
	code, _, stderr = runBinary(t, []string{"DATABASE_URL=" + s.url("app_cert", "localhost", verified)}, "status")
	require.Equal(t, 1, code, "no certificate, no entry: %s", stderr)
	require.Contains(t, stderr, "connection requires a valid client certificate")

	// sslrootcert=system: the system's roots, which SSL_CERT_FILE names.
	system := "DATABASE_URL=" + strings.Replace(s.url("app", "localhost", "sslrootcert=system"), "app@", "app:app-secret@", 1)
	code, _, stderr = runBinary(t, []string{system, "SSL_CERT_FILE=" + ca}, "status")
	require.Zero(t, code, stderr)
	code, _, stderr = runBinary(t, []string{system, "SSL_CERT_FILE=" + filepath.Join(s.dir, "none.pem"), "SSL_CERT_DIR=" + filepath.Join(s.dir, "none")}, "status")
	require.Equal(t, 1, code, stderr)
	require.Contains(t, stderr, "certificate signed by unknown authority")
	require.Equal(t, 1, strings.Count(strings.TrimSpace(stderr), "\n")+1, "one line: %q", stderr)
}
