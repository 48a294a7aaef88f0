package enforce

import (
	"errors"
	"strconv"
)

// Settings a Change is about, as logs and metrics label them.
const (
	SettingScore = "oom_score_adj"
	SettingGroup = "oom_group"
)

// What is what became of a setting.
type What int

const (
	Left        What = iota // the plan does not set it
	Planned                 // the plan sets it; the runtime applies it
	Changed                 // written: From was there
	Unchanged               // From was there already
	Unsupported             // the node cannot have it (Why)
	Refused                 // the cgroup or process is not one container's own (Err)
	Failed                  // reading or writing failed (Err)
)

// Change is one setting of one container: what was there, what it must be,
// and what became of it. The hook's log line, the plugin's log lines and the
// metrics all describe changes with it.
type Change struct {
	Setting  string // SettingScore or SettingGroup
	From, To string // as the kernel writes them; From "" when unknown
	What     What
	Why      string // for Unsupported
	Err      error  // for Refused and Failed
}

// String is the change for a log line: "-997→900", "unset→900",
// "unchanged 900", "left", "unsupported on cgroup v1", "refused", "failed".
func (c Change) String() string {
	switch c.What {
	case Planned, Changed:
		from := c.From
		if from == "" {
			from = "unset"
		}
		return from + "→" + c.To
	case Unchanged:
		return "unchanged " + c.From
	case Unsupported:
		return c.Why
	case Refused:
		return "refused"
	case Failed:
		return "failed"
	}
	return "left"
}

func itoa(v int) string { return strconv.Itoa(v) }

func joinErr(a, b error) error { return errors.Join(a, b) }
