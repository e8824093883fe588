package store

import (
	"errors"
	"fmt"
	"strings"

	"github.com/jackc/pgx/v5/pgconn"
)

// SettingError is an error of the server that one of its timeouts raised: it names the setting, so that
// the one line logged for it says what to look at. DBAs set these on the server, a database or a role
// (ALTER DATABASE ... SET, ALTER ROLE ... SET); see withoutTransactionTimeout for which of them inorder's
// cursor transactions override.
type SettingError struct {
	// Setting is the server setting that ended the statement, the transaction or the session.
	Setting string
	// Err is the server's error.
	Err error
}

func (e *SettingError) Error() string {
	what := "the server's " + e.Setting
	if e.Setting == "idle_in_transaction_session_timeout" {
		what += " (inorder sets it in its cursor transactions: --idle-timeout, Config.IdleInTransactionTimeout)"
	} else {
		what += " (set on the server, the database or the role: SELECT * FROM pg_db_role_setting)"
	}
	return fmt.Sprintf("%v: %s ended it", e.Err, what)
}

func (e *SettingError) Unwrap() error { return e.Err }

// Setting returns the server setting whose timeout raised err, or "" when none did: 25P04
// transaction_timeout, 25P03 idle_in_transaction_session_timeout, 57P05 idle_session_timeout, and
// 57014 and 55P03 when their message says statement_timeout or lock_timeout (57014 is also a cancel
// request, which inorder sends when its own deadline passes, and 55P03 a NOWAIT or SKIP LOCKED that
// found the lock taken).
func Setting(err error) string {
	var pgErr *pgconn.PgError
	if !errors.As(err, &pgErr) {
		return ""
	}
	switch pgErr.Code {
	case "25P04":
		return "transaction_timeout"
	case "25P03":
		return "idle_in_transaction_session_timeout"
	case "57P05":
		return "idle_session_timeout"
	case "57014":
		if strings.Contains(pgErr.Message, "statement timeout") {
			return "statement_timeout"
		}
	case "55P03":
		if strings.Contains(pgErr.Message, "lock timeout") {
			return "lock_timeout"
		}
	}
	return ""
}

// NameSetting returns err as a *SettingError when one of the server's timeouts raised it (see Setting),
// else err unchanged.
func NameSetting(err error) error {
	var named *SettingError
	if errors.As(err, &named) {
		return err
	}
	if s := Setting(err); s != "" {
		return &SettingError{Setting: s, Err: err}
	}
	return err
}
