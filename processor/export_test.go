package processor

// ForceWritersHorizon makes the named process use the writers horizon whatever its created_at holds: the
// unsafe choice, for tests that show what the transactions horizon is for.
func ForceWritersHorizon(process string) { forcedWriters.Store(process, true) }
