package processor

// The byte budget: a batch is bounded by bytes as well as by records, so that a backlog of big records
// (documents of a megabyte, an export of two hundred) is read a few at a time, and what the processor holds
// at once is sized by the budget rather than by the batch bound times the largest record.
//
// The read cannot know a row's size before it sends it, and reading every value to measure it would read
// the rows the budget leaves out too. So the read bounds a running sum of each row's size as its header or
// TOAST pointer tells it (source.Table.SizeExpr): exact for text and bytea, the stored size for the other
// types, which for a compressed json or jsonb document is below what is sent. The processor learns that
// ratio from each read (what it received over what the read counted) and asks the next read for the budget
// divided by it. A read that still receives more than the budget, the first one over compressed documents,
// keeps its records up to the budget and drops the rest, read again next time (scanItems): the budget
// bounds memory, and what a wrong guess costs is the dropped rows' transfer, once.
//
// A record larger than the whole budget is read alone: the first row of a read always passes.

// bounds is what one read may bring: limit records, bytes received, and sized bytes as the read counts
// them (bytes over the learned ratio).
type bounds struct {
	limit int
	bytes int64
	sized int64
}

// readResult is what one read brought: its records, the bytes received for them and their size as the
// read counted it, whether a row follows the last of them below the horizon, and whether a backlog lies
// behind them (the limit or the budget cut the read).
type readResult[T any] struct {
	items    []item[T]
	received int64
	sized    int64
	largest  int64 // the largest record received
	more     bool
	full     bool
}

// byteBudget keeps the byte budget of a processor's reads and what it has learned of the rows.
type byteBudget struct {
	bytes int64
	// ratio is received bytes per counted byte, as the last read large enough to say found it, never
	// below 1: 1 until then, and for text and bytea columns, which are counted as sent.
	ratio float64
	// largest is the largest record of the recent reads: the largest of the last read, or half the one
	// before, whichever is larger. Zero until a read has brought a record.
	largest int64
}

// minLearn is the least a read must have counted for its ratio to be learned: a few small rows say more
// about the row overhead than about compression.
const minLearn = 64 << 10

// bounds gives the next read's bounds under limit. While the recent records are small enough that limit
// of the largest would take at most half the budget, the read has no bound by bytes in its SQL (sized
// zero): the window that counts sizes costs a stream of small records a tenth of its time on the server.
// A big record among them is still kept within the budget as it arrives (scanItems), and the next read
// counts sizes again. The first read of a processor counts them: nothing is known yet.
func (b *byteBudget) bounds(limit int) bounds {
	if b.largest > 0 && int64(limit)*b.largest <= b.bytes/2 {
		return bounds{limit: limit, bytes: b.bytes}
	}
	r := max(b.ratio, 1)
	return bounds{limit: limit, bytes: b.bytes, sized: max(int64(float64(b.bytes)/r), 1)}
}

// learn takes the bytes a read received for the rows it kept, their size as it counted them, and the
// largest of them.
func (b *byteBudget) learn(received, sized, largest int64) {
	if largest > 0 {
		b.largest = max(largest, b.largest/2)
	}
	if sized < minLearn {
		return
	}
	b.ratio = max(float64(received)/float64(sized), 1)
}

// rowBytes is what a row takes as received: its values' bytes.
func rowBytes(raw [][]byte) int64 {
	var n int64
	for _, v := range raw {
		n += int64(len(v))
	}
	return n
}
