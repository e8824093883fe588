package console

// SamplesOf returns how many lag samples the console keeps of a process, for the tests.
func SamplesOf(c *Console, process string) int { return len(c.history.of(process)) }
