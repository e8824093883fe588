package handlers

// AppendCompactRaw exposes appendCompactRaw to the fuzz tests, which hold it to json.Marshal itself rather
// than to AppendJSON, whose fallback to encoding/json would hide a valid document it wrongly rejected.
var AppendCompactRaw = appendCompactRaw
