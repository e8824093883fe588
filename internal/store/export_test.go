package store

// RotateCheckpointsFreshAt is RotateCheckpoints with freshAt in place of freshTurnSize, so that a test
// makes turns with a few hundred entries rather than megabytes.
var RotateCheckpointsFreshAt = rotateCheckpoints
