// Package traceparent gives an application the W3C trace context of its current span, to write into the
// outbox row with the business change, in the same transaction. inorder reads it back from the row (the
// traceparent and tracestate columns, or those inordertype.Source names) and traces each delivery of the
// record as a continuation of that span: the request that wrote the row and the call that delivered it
// end up in one trace, and the sink's receiver, which gets the context in a header or attribute, in it
// too.
//
// A table takes the context in two nullable text columns:
//
//	ALTER TABLE outbox ADD COLUMN traceparent text, ADD COLUMN tracestate text;
//
// A row written outside any span has NULL in both, and its deliveries start traces of their own.
package traceparent
