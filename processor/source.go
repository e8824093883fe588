package processor

import (
	"github.com/inorder-dev/inorder/internal/source"
)

// ErrInvalidSource is wrapped by every error about a source that cannot be read as configured: a missing
// table, column or index, or a column of the wrong type. Retrying does not help; fix the configuration.
var ErrInvalidSource = source.ErrInvalidSource
