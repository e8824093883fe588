package main

// The Mozilla root certificates, compiled into the binary. Go uses them only when the system has none (no
// /etc/ssl/certs, as in inorder's image, which has no base), so an HTTPS webhook, broker or OTLP endpoint
// whose certificate chains to a public CA verifies in the image as it does on a host. A host's own roots
// (SSL_CERT_FILE, SSL_CERT_DIR, the distribution's bundle) win whenever it has any.
import _ "golang.org/x/crypto/x509roots/fallback"
