package cursor

// StatusOf is statusOf, for the table of its rules.
var StatusOf = statusOf
