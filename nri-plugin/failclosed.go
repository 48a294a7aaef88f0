package nriplugin

import (
	"strconv"
	"strings"
)

// Failing closed is the runtime's: NRI's default validator (containerd
// 2.2, CRI-O 1.34 and later, turned on by install --fail-closed) refuses a
// container whose pod lists oomguard in required-plugins.noderesource.dev
// while no plugin of that name is connected. The plugin only says whether
// the runtime it is connected to can.

// validatorSince is the first release of each runtime with NRI's default validator.
var validatorSince = map[string][2]int{"containerd": {2, 2}, "cri-o": {1, 34}}

// validates reports whether the runtime release named can fail closed; an
// unknown runtime or a version that does not parse cannot.
func validates(runtime, version string) bool {
	since, ok := validatorSince[strings.ToLower(runtime)]
	if !ok {
		return false
	}
	v := strings.TrimPrefix(version, "v")
	major, rest, _ := strings.Cut(v, ".")
	minor, _, _ := strings.Cut(rest, ".")
	minor = strings.TrimRightFunc(minor, func(r rune) bool { return r < '0' || r > '9' })
	ma, err1 := strconv.Atoi(major)
	mi, err2 := strconv.Atoi(minor)
	if err1 != nil || err2 != nil {
		return false
	}
	return ma > since[0] || ma == since[0] && mi >= since[1]
}

// sayFailClosed logs and sets oomguard_fail_closed_enforced for the runtime
// the plugin connected to.
func (p *Plugin) sayFailClosed(runtime, version string) {
	if validates(runtime, version) {
		p.m.failClosed.Set(1)
		p.log.Info("failing closed: the runtime refuses containers whose pod requires oomguard while it is not connected", "runtime", runtime, "version", version)
		return
	}
	p.m.failClosed.Set(0)
	p.log.Warn("cannot fail closed: this runtime has no NRI validation (containerd 2.2, CRI-O 1.34 and later have): pods that require oomguard start unguarded while it is away, and are fixed at its next Synchronize",
		"runtime", runtime, "version", version)
}
