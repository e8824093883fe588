// Package harness holds, in its subdirectories, what inorder's tests and benchmarks run on and nothing a
// user's program links: throwaway PostgreSQL clusters (pgcluster, pgtest, testdb), a real PgBouncer
// (pgbouncer), a proxy that adds a network's round trip or swallows bytes (tcpproxy), a billing API that
// charges per request (billingtest), the fault suite (fault), the benchmarks (bench), and the record of
// the public API (api).
//
// The machinery inorder runs on in production lives beside this folder, under internal/, never in it.
package harness
