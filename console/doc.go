// Package console is inorder's web console for the people on call: every process of a database at a
// glance, one process in detail, and the operator actions, in a browser. It is an http.Handler, to mount
// on a service's own admin server beside the metrics and health handlers, and what `inorder console`
// serves.
//
// # Pages
//
// The overview lists every process with its state (running, idle, retrying, halted, paused, held,
// parked keys), the instances running it, its position, the rows and time behind, and a chart of its lag
// over the last hour, with its axes in rows and minutes, as this console measured it: every
// Config.SampleInterval while Console.Run runs, and at each page view. A process page adds the failing
// record with its key, the start of its content, its error and the sink's answer, and the commands that
// retry or skip it (as `inorder status` prints them, read-only pages included); the records in flight, the
// transaction holding the horizon back (pid, age, application name), the parked keys, the partitions and
// the audit trail.
// Both pages name, in a box over the figures, what has held the database's xmin horizon past
// Config.XminHoldAfter (a session, a prepared transaction, a replication slot, a standby's feedback), and
// what it costs: vacuum cannot clean the outbox that prune empties. The console times a holder whose start
// its role may not read (without pg_read_all_stats) from when it first saw it, across page views.
// The pages are server-rendered HTML, readable without JavaScript; a few lines of script refresh their
// figures every few seconds.
//
// # Actions
//
// Pause, resume, retry now, skip the failing record, rewind and redrive a parked key go through the
// actions of package cursor, with their rules: each asks for a reason and the operator's name, and is
// audited with that name as the actor; behind a service's own sign-in, Config.ActorFunc gives the name
// instead. A console is read-only unless Config.AllowActions is set: it then
// shows no form, and refuses every action.
//
// # Safety
//
// With Config.Token set, every request must carry it: as a bearer token, or as the session cookie the
// login page sets once the token is typed in (compared in constant time; it lasts 12 hours). Without a
// token, the console answers only requests made on this machine, whatever address it is mounted on: from
// a loopback address, not forwarded by a proxy, and for localhost or a loopback address as the host (so a
// page elsewhere whose name is pointed at 127.0.0.1 reads nothing). Actions are POSTs protected from
// cross-site requests twice: net/http's CrossOriginProtection, and a CSRF token each form carries that must
// match the visitor's cookie. Pages show no database password, no header value and no token; a record's
// error is shown as the processor stored it, which the sinks redact before storing. The one row a page
// reads from a source table is the record a stream is halted on or retrying: its key and the first 300
// characters of the row as JSON, escaped.
package console
