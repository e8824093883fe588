// Package tcpproxy is a TCP proxy on loopback in front of one server (a PostgreSQL server, usually), for
// tests and benchmarks: it puts a network with a round trip of a cloud region between a client and a
// server on the same machine, counts the round trips that cross it, and breaks the path in the ways a real
// network breaks it. Nothing in it is meant for production.
//
// # Delay
//
// Config.Delay is added to each direction: every chunk the proxy reads is written on that much later, in
// the order it was read, by one writer per direction of each connection. A delay of 0.5ms each way turns
// a loopback round trip of tens of microseconds into one of a millisecond and a little more, what a
// client and a server in one cloud region see. The proxy adds no bandwidth limit and no jitter of its
// own; what the timers of the machine add comes on top. With no delay, bytes are written on at once.
//
// # Trickle
//
// Trickle bounds the rate of the bytes from the server to each client, as a slow link does, so that a large
// answer takes seconds to come while its bytes keep coming, a piece every 1/50 of a second. ToClients
// counts the bytes passed toward clients, so that a test can act in the middle of an answer.
//
// # Round trips
//
// Exchanges counts the round trips that crossed the proxy: on each connection, every time the client
// sends after the server has (or sends its first bytes), one exchange, summed over the connections. A
// pipelined stream of statements sent before any answer is one exchange, as it costs one round trip.
//
// # Faults
//
// Swallow makes every connection open at that moment dead the way a NAT or a load balancer that forgot it
// makes it: the proxy goes on reading both sides, so their kernels see every byte acknowledged and
// neither TCP keepalives nor TCP_USER_TIMEOUT fire, but nothing reaches the other side any more, not
// even the end of the stream: a side that closes its socket leaves the other one open. Those connections
// stay dead for good; only connections opened later pass.
//
// SwallowNew does the same to the connections accepted while it is on, from their first byte: a path that
// accepts TCP but never answers the PostgreSQL start-up. Heal turns it off and lets bytes pass again on
// those connections. What was swallowed stays lost, as it would behind a middlebox that dropped it, so a
// PostgreSQL connection healed in the middle of its start-up is usually broken (the server takes what
// comes next for the start-up message, and refuses it); what Heal gives back is the path.
package tcpproxy
