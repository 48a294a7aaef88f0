package doctor

import (
	"errors"
	"fmt"
	"regexp"
	"strconv"
	"strings"

	"github.com/oomguard/oomguard/internal/kernel"
)

// Console output speed: the kernel prints the OOM task dump with interrupts
// off; about 145 characters a task, 10 bits a character on a serial line.
const charsPerTask = 145

var serialRE = regexp.MustCompile(`^(ttyS|ttyAMA|ttymxc|ttyPS|ttySAC|ttyMSM|ttyUSB)\d+$`)

// checkConsole: how long one OOM kill holds the console.
func (n *node) checkConsole() Finding {
	f := Finding{Check: "console"}
	dump, err := kernel.ReadSysctl(n.root, "vm.oom_dump_tasks")
	if err != nil {
		f.Severity, f.Summary = Unknown, "cannot read vm.oom_dump_tasks: "+err.Error()
		return f
	}
	if dump == "0" {
		f.Severity, f.Summary = OK, "vm.oom_dump_tasks = 0: OOM kills print no task list"
		return f
	}
	consoles, err := readConsoles(n.root)
	if err != nil {
		f.Severity, f.Summary = Unknown, "cannot read /proc/consoles: "+err.Error()
		return f
	}
	params, _ := cmdlineParams(n.root)
	var serial *console
	for i := range consoles {
		if consoles[i].Enabled && serialRE.MatchString(consoles[i].Name) {
			serial = &consoles[i]
			break
		}
	}
	if serial == nil {
		f.Severity, f.Summary = OK, "no serial console: the task dump goes to fast consoles only"
		return f
	}
	baud := 9600 // the kernel's default for console=ttySn without options
	for _, kv := range params {
		if kv[0] != "console" {
			continue
		}
		dev, opts, _ := strings.Cut(kv[1], ",")
		if dev != serial.Name {
			continue
		}
		digits := opts[:len(opts)-len(strings.TrimLeft(opts, "0123456789"))] // "115200n8" → "115200"
		if b, err := strconv.Atoi(digits); err == nil && b > 0 {
			baud = b
		}
	}
	level := 7 // when kernel.printk cannot be read: the usual default
	if pk, err := kernel.ReadSysctl(n.root, "kernel.printk"); err == nil {
		fs := strings.Fields(pk)
		v, perr := 0, errors.New("empty")
		if len(fs) > 0 {
			v, perr = strconv.Atoi(fs[0])
		}
		if perr != nil || v < 0 || v > 15 {
			f.Severity, f.Summary = Unknown, fmt.Sprintf("kernel.printk %q is not a console log level: cannot tell whether the task dump reaches %s", pk, serial.Name)
			return f
		}
		level = v
	}
	tasks := 0
	for _, p := range n.procs {
		if !p.Kernel {
			tasks++
		}
	}
	secs := float64(tasks*charsPerTask) / (float64(baud) / 10)
	f.Metric = &metric{Name: "oomguard_doctor_console_dump_seconds", Value: secs, Help: consoleDumpHelp}
	detail := fmt.Sprintf("%d tasks × %d characters on %s at %d baud (console_loglevel %d)", tasks, charsPerTask, serial.Name, baud, level)
	if level <= 6 {
		f.Metric.Value = 0
		f.Severity, f.Summary = OK, fmt.Sprintf("console_loglevel %d keeps the task dump (KERN_INFO) off %s", level, serial.Name)
		return f
	}
	f.Details = []string{detail}
	switch {
	case secs > 5:
		f.Severity = Critical
		f.Summary = fmt.Sprintf("one OOM kill holds %s for %.0f s with interrupts off: past the ENA driver's 5 s Tx threshold, the NIC resets and the node goes NotReady", serial.Name, secs)
	case secs > 1:
		f.Severity = Warning
		f.Summary = fmt.Sprintf("one OOM kill holds %s for %.1f s with interrupts off", serial.Name, secs)
	default:
		f.Severity = OK
		f.Summary = fmt.Sprintf("one OOM task dump takes %.2f s on %s", secs, serial.Name)
		return f
	}
	f.Fix = "sysctl -w vm.oom_dump_tasks=0 (persist in /etc/sysctl.d/), or keep KERN_INFO off the console (sysctl -w kernel.printk=\"4 4 1 7\"), or boot with a faster or no serial console"
	return f
}
