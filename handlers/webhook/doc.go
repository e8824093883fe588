// Package webhook is a sink that POSTs each record to an HTTP endpoint and lets the position move past the
// record only once the endpoint answered with a 2xx status. The endpoint is either a receiver of your own,
// which verifies a signature, or a third-party API (a payment processor's usage or billing API), which
// takes a body of its own, an API key in a header and an idempotency key.
//
// # Request
//
// Each record is one POST to Config.URL with Content-Type application/json. By default the body is this
// envelope, on one line:
//
//	{"process":"<name>","id":"<record id>","created_at":"<RFC 3339 time>","key":"<key>","attempt":<n>,"record":<value>}
//
// The process is the name of the stream; id is the record's id column as text; created_at is the record's
// created_at column in UTC with as many fractional digits as it has (Go's time.RFC3339Nano); key is the
// record's key column as text (for example the aggregate id), and the field is left out when the process has
// no key column; attempt counts deliveries of this record, 1 the first time (a record sent again after a
// failure, an operator's retry included, carries the next number, whether it is the record that failed or
// one of another key that went out ahead of it with processor.Config.MaxInFlight above 1); record is the
// row itself as encoding/json marshals it, which for handlers.Row is one object with the columns in their
// selected order. The fields always appear in this order.
//
// With Config.BodyColumn the body is instead that column's JSON, as it is: an application that writes
// the body a third-party API expects into its outbox row (a payload column) has it sent unchanged. A
// record whose column is missing, NULL or not valid JSON halts the stream with a permanent error naming
// the record and the column, and nothing is sent for it.
//
// The request carries these headers besides the static ones of Config.Headers (an API's Authorization
// bearer token, a version header):
//
//	Content-Type: application/json
//	Idempotency-Key: <process>:<record id>
//	Inorder-Attempt: <n>
//	Inorder-Signature: t=<unix seconds>,v1=<hex HMAC-SHA256>
//
// The idempotency key goes under the name Config.IdempotencyHeader gives, Idempotency-Key by default, and
// the signature headers are those of the scheme Config.Signature chooses (see the next section). The
// handler's own headers win over Config.Headers of the same name. When the delivery is traced, or the row
// carries a trace context (see processor's "Tracing"), the request also carries traceparent (and
// tracestate): the W3C trace context of the request's client span "POST", a child of the delivery
// attempt's, which the receiver's propagator continues.
//
// The idempotency key is the same on every delivery of a record, whatever the attempt: a receiver that
// stores it with the record's effect, and answers 2xx without acting again when it sees a key it already
// has, turns the processor's at-least-once delivery into exactly-once effects. A record is delivered again
// when its request failed or timed out on the sender's side even though the receiver had acted, and when an
// instance crashed between the response and the durable position.
//
// The headers repeat fields of the envelope for convenience, but only the body is signed (and, under
// Standard Webhooks, the webhook-id): a receiver that must not be fooled takes the process, id and attempt
// from the verified body.
//
// # Signature
//
// Config.Signature chooses one of three schemes. Each signs the exact body bytes, and a receiver must
// verify them before it parses them.
//
// SignatureInorder, the default, sends Inorder-Signature with the Unix time the request was signed at and
// an HMAC-SHA256, keyed with Config.Secret, of that time in decimal, a full stop and the exact body bytes:
//
//	Inorder-Signature: t=<unix seconds>,v1=hex(HMAC-SHA256(secret, "<t>" + "." + body))
//
// The scheme is the one Stripe uses, so a receiver written with stripe-go verifies it unchanged:
// webhook.ValidatePayload(body, r.Header.Get("Inorder-Signature"), secret). The timestamp is inside the
// MAC so that it cannot be changed without the secret, which gives replay protection: a receiver rejects
// requests signed too long ago, so a request captured on the wire cannot be replayed later. Receivers in
// Go may also call Verify or VerifyRequest, which compare in constant time and accept timestamps within a
// tolerance of their own clock (5 minutes when none is given). Verify accepts several v1 entries in
// one header and unknown entries are ignored, so that a sender can sign with an old and a new secret while
// the secret is rotated, and later versions of the scheme can be added beside v1.
//
// SignatureStandardWebhooks follows the Standard Webhooks specification (standardwebhooks.com), whose
// official libraries verify it in a dozen languages:
//
//	webhook-id: <process>:<record id>
//	webhook-timestamp: <unix seconds>
//	webhook-signature: v1,base64(HMAC-SHA256(key, "<webhook-id>.<webhook-timestamp>." + body))
//
// The key is Config.Secret, or, for a secret in the specification's form whsec_<base64>, the bytes the
// base64 decodes to: give the handler and the receiver the same whsec_ string. In Go:
// standardwebhooks.NewWebhook(secret) and wh.Verify(body, r.Header), from module
// github.com/standard-webhooks/standard-webhooks/libraries (package go).
//
// SignatureNone signs nothing, for an API that authenticates the sender by a header of Config.Headers
// instead; Config.Secret must then be empty.
//
// # Retries
//
// The response decides what happens to the record. The question each answer settles is whether this
// record is wrong, or the sink is unusable for every record:
//
//	answer                                          whose    what the stream does
//	2xx                                             -        delivered; the position moves past the record
//	400, 409, 413, 415, 422 and every other 4xx     record   handlers.Permanent: halts on it (or parks its key)
//	408, 500, a timeout                             record   retried with backoff; halts after HaltAfter
//	401, 407 (credentials), 403 (rights)            sink     handlers.Unavailable: waits for the sink, retrying
//	404, 405, 410, 421, 426, 505 (no such endpoint) sink     the same
//	3xx (a redirect; the client follows none)       sink     the same
//	429 (rate limit), 502, 503, 504, 511            sink     the same; Retry-After pauses every request
//	no response: DNS, TLS, refused or cut           sink     the same
//
// A sink's outage (handlers.Unavailable, with what to check: the URL, the credentials, the rate limit)
// never halts the stream, never parks a key and never suggests a skip: the stream waits and retries with
// backoff, and flows again by itself once the sink accepts. For an API whose 404 (or another of these)
// means the record's own problem, a customer that does not exist say, Config.RecordStatuses makes it the
// record's refusal. A Retry-After header, in seconds or as an HTTP date, is honoured through
// handlers.RetryAfter; on a 429 or a 503 it holds every request of the handler, not only the refused
// one. Config.MaxRate spaces the requests of every record in flight, for an API that caps requests.
//
// A request that gets no response is retried as a timeout. Config.Timeout bounds how long nothing moves,
// not how long the request takes: a body of megabytes on a slow link goes on for as long as the
// connection keeps taking its bytes, and each of them is reported to the processor (handlers.Progress),
// so that its handler timeout waits as long, within the lease. A receiver that stops reading, or never
// answers, is given up on a timeout after the last byte moved, with "no response within" and the timeout
// in the error.
//
// An error for a status is a *StatusError; its text names the URL (without userinfo or query), the status
// and a bounded excerpt of the response body, for example
//
//	webhook POST https://hooks.example.com/bookings: 400 Bad Request: {"error":"unknown customer"}
//
// and it is what the processor stores in the cursor row as the halted record's error. The secret and the
// values of Config.Headers never appear in errors: some APIs echo the key they refused in their answer,
// so the excerpt has them replaced by [redacted] (values and words of 8 characters or more; the secret
// whatever its length).
package webhook
