package main

import "time"

// statusDoc is the documented JSON form of `inorder status --json`, decoded as a script would: the tests
// read what the command prints through it, so a renamed field breaks them as it would break a script.
type statusDoc struct {
	Processes     []processDoc `json:"processes"`
	XminHold      *xminHoldDoc `json:"xmin_hold"`
	XminHoldError string       `json:"xmin_hold_error"`
}

// xminHoldDoc is who holds the database's xmin horizon (added with --xmin-hold-after).
type xminHoldDoc struct {
	Database         string          `json:"database"`
	CheckedAt        time.Time       `json:"checked_at"`
	ThresholdSeconds float64         `json:"threshold_seconds"`
	Held             bool            `json:"held"`
	Holders          []xminHolderDoc `json:"holders"`
	Oldest           *xminHolderDoc  `json:"oldest"`
	Cost             string          `json:"cost"`
}

type xminHolderDoc struct {
	Kind        string     `json:"kind"`
	PID         int        `json:"pid"`
	Database    string     `json:"database"`
	User        string     `json:"user"`
	Application string     `json:"application"`
	State       string     `json:"state"`
	XactStart   *time.Time `json:"xact_start"`
	QueryStart  *time.Time `json:"query_start"`
	StartHidden bool       `json:"start_hidden"`
	GID         string     `json:"gid"`
	PreparedAt  *time.Time `json:"prepared_at"`
	Slot        string     `json:"slot"`
	Xmin        uint32     `json:"xmin"`
	XminAge     int64      `json:"xmin_age"`
	OwnXid      bool       `json:"own_xid"`
	Since       time.Time  `json:"since"`
	SinceFrom   string     `json:"since_from"`
	HeldSeconds float64    `json:"held_seconds"`
}

type processDoc struct {
	Process        string     `json:"process"`
	State          string     `json:"state"`
	Partitions     int        `json:"partitions"`
	Paused         bool       `json:"paused"`
	RecordsHandled int64      `json:"records_handled"`
	Throughput     float64    `json:"throughput_per_second"`
	Locked         bool       `json:"locked"`
	Holder         string     `json:"holder"`
	HolderPID      int        `json:"holder_pid"`
	Epoch          int64      `json:"owner_epoch"`
	LeaseExpiresAt *time.Time `json:"lease_expires_at"`
	Connected      int        `json:"instances_connected"`
	Position       struct {
		CreatedAt *time.Time `json:"created_at"`
		ID        *string    `json:"id"`
	} `json:"position"`
	Source *struct {
		Table           string `json:"table"`
		IDColumn        string `json:"id_column"`
		CreatedAtColumn string `json:"created_at_column"`
		KeyColumn       string `json:"key_column"`
		Partition       *struct {
			Index int `json:"index"`
			Count int `json:"count"`
		} `json:"partition"`
	} `json:"source"`
	Behind *struct {
		Rows             int64      `json:"rows"`
		Capped           bool       `json:"capped"`
		OldestCreatedAt  *time.Time `json:"oldest_created_at"`
		OldestAgeSeconds float64    `json:"oldest_age_seconds"`
	} `json:"behind"`
	Halt *struct {
		RecordID       string     `json:"record_id"`
		Error          string     `json:"error"`
		Permanent      bool       `json:"permanent"`
		Status         *int       `json:"status"`
		Attempts       int        `json:"attempts"`
		FirstFailureAt time.Time  `json:"first_failure_at"`
		LastFailureAt  time.Time  `json:"last_failure_at"`
		NextAttemptAt  *time.Time `json:"next_attempt_at"`
		HaltedAt       *time.Time `json:"halted_at"`
		Unavailable    *string    `json:"unavailable"`
	} `json:"halt"`
	Hold *struct {
		WriterPID int       `json:"writer_pid"`
		Since     time.Time `json:"since"`
	} `json:"hold"`
	InFlight *struct {
		Records     int       `json:"records"`
		OldestSince time.Time `json:"oldest_since"`
	} `json:"in_flight"`
	Parked *struct {
		Keys           int       `json:"keys"`
		Records        int       `json:"records"`
		Since          time.Time `json:"since"`
		AgeSeconds     float64   `json:"age_seconds"`
		OldestRecordID string    `json:"oldest_record_id"`
	} `json:"parked"`
	SourceWait *string   `json:"source_wait"`
	Error      string    `json:"error"`
	UpdatedAt  time.Time `json:"updated_at"`
}
