package inordertype

import (
	"fmt"
	"time"
)

// StartFrom says where a process that has no cursor row yet starts: StartFromBeginning, StartFromNow or
// StartFromTime. It matters once, when the process is registered; an existing process keeps its position
// whatever it says. String and ParseStartFrom write and read it as "beginning", "now" or an RFC 3339 time.
//
// Its fields are unexported so that only those three values can be made. The zero value says nothing
// (IsZero), and a processor refuses to register a process without it when its table already has rows: a
// new process name (a typo beside the real one, say) would otherwise deliver the whole table again, to a
// sink that may charge for each. On an empty table the zero value starts at the beginning, since there is
// nothing to deliver twice.
type StartFrom struct {
	set bool      // false only in the zero value, which says nothing
	now bool      // the moment of registration, read from the database's clock
	at  time.Time // the time given to StartFromTime, in UTC; zero for the beginning and for now
}

var (
	// StartFromBeginning registers an unknown process before every existing row.
	StartFromBeginning = StartFrom{set: true}
	// StartFromNow registers an unknown process after every row created before the moment of
	// registration, as the database's clock tells it.
	StartFromNow = StartFrom{set: true, now: true}
)

// StartFromTime registers an unknown process so that it delivers the rows created at or after t. A zero t
// is the beginning.
func StartFromTime(t time.Time) StartFrom { return StartFrom{set: true, at: t.UTC()} }

// ParseStartFrom reads "beginning", "now" or an RFC 3339 time, as String writes them.
func ParseStartFrom(v string) (StartFrom, error) {
	switch v {
	case "beginning":
		return StartFromBeginning, nil
	case "now":
		return StartFromNow, nil
	}
	t, err := time.Parse(time.RFC3339Nano, v)
	if err != nil {
		return StartFrom{}, fmt.Errorf("start %q is none of beginning, now and an RFC 3339 time", v)
	}
	return StartFromTime(t), nil
}

// IsZero reports whether s is the zero value, which says nothing (see StartFrom).
func (s StartFrom) IsZero() bool { return !s.set }

// IsBeginning reports whether s is StartFromBeginning (or StartFromTime of the zero time).
func (s StartFrom) IsBeginning() bool { return s.set && !s.now && s.at.IsZero() }

// IsNow reports whether s is StartFromNow: the moment of registration, which the database's clock
// decides when the cursor row is inserted, so that it is the same clock as the rows' created_at.
func (s StartFrom) IsNow() bool { return s.now }

// Time is the time s starts at, in UTC, for StartFromTime: the process delivers the rows created at or
// after it. It is zero for the beginning, for now (the time is the database's, known only at
// registration) and for the zero value.
func (s StartFrom) Time() time.Time { return s.at }

// String is "beginning", "now", an RFC 3339 time with nanoseconds, or "" for the zero value.
func (s StartFrom) String() string {
	switch {
	case !s.set:
		return ""
	case s.now:
		return "now"
	case s.at.IsZero():
		return "beginning"
	}
	return s.at.Format(time.RFC3339Nano)
}
