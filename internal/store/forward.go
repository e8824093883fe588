package store

import (
	"context"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/inorder-dev/inorder/inordertype"
)

// The methods below hand their calls to the Repository's parts, for the callers that have not moved to
// the parts yet; they go once the callers have.

func (r *Repository) Conn(ctx context.Context) (*pgx.Conn, error) { return r.Session.Conn(ctx) }
func (r *Repository) Detach()                                     { r.Session.Detach() }
func (r *Repository) Contended() bool                             { return r.Session.Contended() }
func (r *Repository) Pooled() (pooled, transactions bool)         { return r.Session.Pooled() }
func (r *Repository) Bounded(ctx context.Context) (context.Context, context.CancelFunc) {
	return r.Session.Bounded(ctx)
}
func (r *Repository) Broken(err error) bool                                { return r.Session.Broken(err) }
func (r *Repository) Owner() bool                                          { return r.Lease.Owner() }
func (r *Repository) Epoch() int64                                         { return r.Lease.Epoch() }
func (r *Repository) Tenure() int64                                        { return r.Lease.Tenure() }
func (r *Repository) Holder() string                                       { return r.Lease.Holder() }
func (r *Repository) Now() time.Time                                       { return r.Lease.Now() }
func (r *Repository) LeaseLeft() time.Duration                             { return r.Lease.LeaseLeft() }
func (r *Repository) LeaseUntil() time.Time                                { return r.Lease.LeaseUntil() }
func (r *Repository) EndedSessions() Ended                                 { return r.Lease.EndedSessions() }
func (r *Repository) ProbeRenewal() *Renewal                               { return r.Lease.ProbeRenewal() }
func (r *Repository) SessionLost() <-chan struct{}                         { return r.Lease.SessionLost() }
func (r *Repository) DeferTake(decide func(context.Context) time.Duration) { r.Lease.DeferTake(decide) }
func (r *Repository) TryLock(ctx context.Context) (bool, error)            { return r.Lock.TryLock(ctx) }
func (r *Repository) Locked() bool                                         { return r.Lock.Locked() }
func (r *Repository) Tx() pgx.Tx                                           { return r.Lock.Tx() }
func (r *Repository) Checkpoint(ctx context.Context, pos inordertype.Position, handled int, flying InFlight) (bool, error) {
	return r.Lock.Checkpoint(ctx, pos, handled, flying)
}
func (r *Repository) Commit(ctx context.Context, handled int) (bool, error) {
	return r.Lock.Commit(ctx, handled)
}
func (r *Repository) Unlock(ctx context.Context) error { return r.Lock.Unlock(ctx) }
func (r *Repository) Abort(ctx context.Context) error  { return r.Lock.Abort(ctx) }
func (r *Repository) SetRider(rider *Rider)            { r.Lock.SetRider(rider) }
func (r *Repository) RideNext()                        { r.Lock.RideNext() }
func (r *Repository) TakeRide() bool                   { return r.Lock.TakeRide() }
func (r *Repository) Renewed(rn *Renewed, token int64) { r.Lock.Renewed(rn, token) }
func (r *Repository) Version() string                  { return r.Position.Version() }
func (r *Repository) State() inordertype.State         { return r.Position.State() }
func (r *Repository) SetPosition(ctx context.Context, pos inordertype.Position, handled int) error {
	return r.Position.SetPosition(ctx, pos, handled)
}
func (r *Repository) SetInFlight(ctx context.Context, f InFlight) error {
	return r.Position.SetInFlight(ctx, f)
}
func (r *Repository) RecordFailure(ctx context.Context, pos inordertype.Position, f Failure) (inordertype.Halt, error) {
	return r.Position.RecordFailure(ctx, pos, f)
}
func (r *Repository) Park(ctx context.Context, p Parked) error { return r.Parking.Park(ctx, p) }
func (r *Repository) MayPark(ctx context.Context) (read, write bool, err error) {
	return r.Parking.MayPark(ctx)
}
func (r *Repository) ParkedKeys(ctx context.Context) ([]string, error) {
	return r.Parking.ParkedKeys(ctx)
}
func (r *Repository) RedriveQueue(ctx context.Context) ([]Parked, error) {
	return r.Parking.RedriveQueue(ctx)
}
func (r *Repository) Unpark(ctx context.Context, p Parked) error { return r.Parking.Unpark(ctx, p) }
func (r *Repository) RedriveFailed(ctx context.Context, p Parked) error {
	return r.Parking.RedriveFailed(ctx, p)
}
func (r *Repository) RedriveSeen(ctx context.Context, seen time.Time) error {
	return r.Parking.RedriveSeen(ctx, seen)
}
func (r *Repository) Register(ctx context.Context, start inordertype.StartFrom) error {
	return r.Registration.Register(ctx, start)
}
func (r *Repository) Missing() bool                        { return r.Registration.Missing() }
func (r *Repository) Created() bool                        { return r.Registration.Created() }
func (r *Repository) Unregister(ctx context.Context) error { return r.Registration.Unregister(ctx) }
func (r *Repository) SetSource(ctx context.Context, src inordertype.Source) (before inordertype.Source, changed bool, err error) {
	return r.Source.SetSource(ctx, src)
}
func (r *Repository) AddLate(ctx context.Context, n int64) error { return r.Source.AddLate(ctx, n) }
func (r *Repository) RecordedFilter(ctx context.Context) (filter string, ran bool, err error) {
	return r.Source.RecordedFilter(ctx)
}
func (r *Repository) SetSourceWait(ctx context.Context, wait string) error {
	return r.Source.SetSourceWait(ctx, wait)
}
func (r *Repository) SetHold(ctx context.Context, pid int, since time.Time) error {
	return r.Source.SetHold(ctx, pid, since)
}
