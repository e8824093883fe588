package bench

import (
	"bufio"
	"fmt"
	"os"
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// machine describes the machine the figures come from: CPU model, logical CPUs, memory, OS and
// architecture.
func machine() string {
	model, cpus := "unknown CPU", 0
	if f, err := os.Open("/proc/cpuinfo"); err == nil {
		sc := bufio.NewScanner(f)
		for sc.Scan() {
			k, v, ok := strings.Cut(sc.Text(), ":")
			if !ok {
				continue
			}
			switch strings.TrimSpace(k) {
			case "processor":
				cpus++
			case "model name":
				if model == "unknown CPU" {
					model = strings.TrimSpace(v)
				}
			}
		}
		_ = f.Close()
	}
	if cpus == 0 {
		cpus = runtime.NumCPU()
	}
	mem := "unknown memory"
	if kb, ok := procField("/proc/meminfo", "MemTotal"); ok {
		mem = fmt.Sprintf("%.1f GiB memory", kb/(1<<20))
	}
	return fmt.Sprintf("%s, %d CPUs (GOMAXPROCS %d), %s, %s/%s, %s", model, cpus, runtime.GOMAXPROCS(0), mem,
		runtime.GOOS, runtime.GOARCH, runtime.Version())
}

// procField reads a "Name:   123 kB" line of a /proc file and returns the number (kB for sizes).
func procField(path, name string) (float64, bool) {
	b, err := os.ReadFile(path)
	if err != nil {
		return 0, false
	}
	for l := range strings.SplitSeq(string(b), "\n") {
		k, v, ok := strings.Cut(l, ":")
		if !ok || k != name {
			continue
		}
		fields := strings.Fields(v)
		if len(fields) == 0 {
			return 0, false
		}
		n, err := strconv.ParseFloat(fields[0], 64)
		return n, err == nil
	}
	return 0, false
}

// rssMiB returns the process's VmRSS and VmHWM in MiB, or zeros where /proc/self/status has none.
func rssMiB() (rss, hwm float64) {
	r, _ := procField("/proc/self/status", "VmRSS")
	h, _ := procField("/proc/self/status", "VmHWM")
	return r / 1024, h / 1024
}

// resetHWM sets VmHWM to the current VmRSS (Linux 4.0 and later), so that it reads the peak since now.
func resetHWM() bool {
	return os.WriteFile("/proc/self/clear_refs", []byte("5"), 0) == nil
}

// cpuTimes is a reading of the machine's CPU time (/proc/stat, all CPUs) and this process's, in clock
// ticks and seconds.
type cpuTimes struct {
	busy, total float64 // machine: ticks not idle or waiting for I/O, and all ticks
	self        time.Duration
}

func readCPU() cpuTimes {
	var c cpuTimes
	if b, err := os.ReadFile("/proc/stat"); err == nil {
		l, _, _ := strings.Cut(string(b), "\n")
		fields := strings.Fields(l)
		for i, f := range fields[1:] {
			v, _ := strconv.ParseFloat(f, 64)
			if i >= 8 { // guest time is counted in user already
				break
			}
			c.total += v
			if i != 3 && i != 4 { // idle, iowait
				c.busy += v
			}
		}
	}
	var ru syscall.Rusage
	if syscall.Getrusage(syscall.RUSAGE_SELF, &ru) == nil {
		c.self = time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
	}
	return c
}

// cpuUse is what happened between two readings: the share of the machine's CPU time that was busy (all
// processes), and this process's CPU time as a share of one CPU over wall.
func cpuUse(from, to cpuTimes, wall time.Duration) (machine, self float64) {
	if t := to.total - from.total; t > 0 {
		machine = (to.busy - from.busy) / t
	}
	if wall > 0 {
		self = float64(to.self-from.self) / float64(wall)
	}
	return machine, self
}
