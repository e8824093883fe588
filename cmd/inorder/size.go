package main

import (
	"fmt"
	"strconv"
	"strings"
)

// byteSize is a flag of a size in bytes: a number with an optional unit, binary (KiB, MiB, GiB) or
// decimal (kB, MB, GB), or plain bytes.
type byteSize int

var sizeUnits = []struct {
	suffix string
	n      int64
}{
	{"KiB", 1 << 10}, {"MiB", 1 << 20}, {"GiB", 1 << 30},
	{"kB", 1000}, {"KB", 1000}, {"MB", 1000 * 1000}, {"GB", 1000 * 1000 * 1000}, {"B", 1},
}

func (s *byteSize) String() string {
	switch n := int64(*s); {
	case n > 0 && n%(1<<20) == 0:
		return fmt.Sprintf("%dMiB", n>>20)
	case n > 0 && n%(1<<10) == 0:
		return fmt.Sprintf("%dKiB", n>>10)
	}
	return strconv.Itoa(int(*s))
}

func (s *byteSize) Set(v string) error {
	num, unit := strings.TrimSpace(v), int64(1)
	for _, u := range sizeUnits {
		if strings.HasSuffix(num, u.suffix) {
			num, unit = strings.TrimSpace(strings.TrimSuffix(num, u.suffix)), u.n
			break
		}
	}
	n, err := strconv.ParseInt(num, 10, 64)
	if err != nil || n < 0 {
		return fmt.Errorf("%q is not a size: a whole number of bytes, or with KiB, MiB or GiB (8MiB)", v)
	}
	if n > (1<<40)/unit {
		return fmt.Errorf("%q is larger than 1TiB", v)
	}
	*s = byteSize(n * unit)
	return nil
}

// Get returns the size, so that byteSize is a flag.Getter like the standard flags.
func (s *byteSize) Get() any { return *s }
