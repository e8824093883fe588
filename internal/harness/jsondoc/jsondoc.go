// Package jsondoc builds JSON documents of a chosen size in the database, for the rows of an outbox that
// carries documents rather than events: the benchmark's big rows and the fault suite's big_rows scenario.
//
// A document is an order with line items, each holding hashes (md5) beside repeated keys and a few
// repeated values, so that it compresses as real documents do: about 2x with pglz, the default TOAST
// compression, where repeat('x', n) would compress to nothing and measure nothing of its size. The server
// builds it (the SQL function FunctionSQL creates), so that a table of gigabytes loads in seconds rather
// than being sent from the client.
package jsondoc

// FunctionSQL creates the function jsondoc(n bigint, bytes bigint) returning jsonb: order n of about bytes
// bytes of JSON as jsonb prints it (1 MiB asked gives 1,049 kB, with the spaces jsonb puts after ':' and
// ','), its line items numbered from 1, no two orders alike. Building one takes about 30 ms a MiB and,
// in the backend, about 16 times its size in memory while its jsonb is parsed.
const FunctionSQL = `
	CREATE OR REPLACE FUNCTION jsondoc(n bigint, bytes bigint) RETURNS jsonb LANGUAGE sql PARALLEL SAFE AS $$
		SELECT ('{"order":' || n || ',"customer":"cust-' || n % 977 || '","lines":[' || string_agg(format(
			'{"line":%s,"sku":"%s","name":"Article %s","qty":%s,"price":%s,"status":"%s","checksum":"%s","ref":"%s"}',
			i, upper(substr(md5(n || ':' || i), 1, 12)), i % 500, 1 + i % 9, round(i * 37 % 10000 / 100.0, 2),
			(ARRAY['reserved', 'shipped', 'returned'])[1 + i % 3], md5(n || '/' || i), md5(i || '/' || n)), ',')
			|| ']}')::jsonb
		FROM generate_series(1, greatest(1, bytes / ` + lineBytes + `)) AS i
	$$`

// lineBytes is what one line item takes as jsonb prints it, on average, for the first million of them.
const lineBytes = "200"
