// Package harness holds, in its subdirectories, what inorder's tests and benchmarks run on and nothing a
// user's program links:
//
//   - api: the record of the public API and the test that keeps the code to it.
//   - bench: the benchmarks (make bench).
//   - billingtest: a billing API that charges per request.
//   - cetest: CloudEvents read back with the official SDK.
//   - fault: the fault suite (make faults).
//   - jsondoc: JSON documents of a chosen size, built by the server, that compress as real ones do.
//   - natstest, rabbitmqtest, redistest: throwaway NATS, RabbitMQ and Redis servers.
//   - pgbouncer: a real PgBouncer in front of the test cluster.
//   - pgcluster, pgtest, testdb: throwaway PostgreSQL clusters and a database per test.
//   - sinktest: what every sink's tests share: the outbox, a processor over it, the order per key.
//   - tcpproxy: a proxy that adds a network's round trip or swallows bytes.
//   - testrun: runs something until its context is done, and reports how it ended.
//
// The machinery inorder runs on in production lives beside this folder, under internal/, never in it.
// TestTheListNamesEveryHarness keeps this list to the folders there are.
package harness
