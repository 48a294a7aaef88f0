package initshim

import (
	"slices"
	"strings"
	"syscall"
	"testing"

	"github.com/oomguard/oomguard/internal/policy"
)

func TestParse(t *testing.T) {
	for _, tc := range []struct {
		name  string
		args  []string
		env   []string
		score int
		group string // "", "0", "1"
		lower bool
		argv  []string
		warn  string
	}{
		{name: "defaults", score: 900, argv: []string{"/sbin/init"}},
		{name: "target", args: []string{"/lib/systemd/systemd", "--system"}, score: 900, argv: []string{"/lib/systemd/systemd", "--system"}},
		{name: "flags", args: []string{"--oom-score-adj", "500", "--oom-group=0", "--allow-lower", "--", "/init", "-x"},
			score: 500, group: "0", lower: true, argv: []string{"/init", "-x"}},
		{name: "short and equals", args: []string{"-s=700", "-g", "1", "init"}, score: 700, group: "1", argv: []string{"init"}},
		{name: "dash dash only", args: []string{"--"}, score: 900, argv: []string{"/sbin/init"}},
		{name: "target flags are its own", args: []string{"/bin/sh", "--oom-score-adj", "1"}, score: 900, argv: []string{"/bin/sh", "--oom-score-adj", "1"}},
		{name: "env wins over flag", args: []string{"--oom-score-adj", "500"}, env: []string{"OOMGUARD_OOM_SCORE_ADJ=950", "OOMGUARD_OOM_GROUP=0"},
			score: 950, group: "0", argv: []string{"/sbin/init"}},
		{name: "last env definition wins", env: []string{"OOMGUARD_OOM_SCORE_ADJ=100", "OOMGUARD_OOM_SCORE_ADJ=200"}, score: 200, argv: []string{"/sbin/init"}},
		{name: "bad score", args: []string{"--oom-score-adj", "abc", "/init"}, score: 900, argv: []string{"/init"}, warn: "--oom-score-adj=abc ignored"},
		{name: "score out of range", args: []string{"-s", "5000"}, score: 900, argv: []string{"/sbin/init"}, warn: "want an integer from -1000 to 1000"},
		{name: "huge score", args: []string{"-s", "99999999999999999999"}, score: 900, argv: []string{"/sbin/init"}, warn: "ignored"},
		{name: "bad env", env: []string{"OOMGUARD_OOM_SCORE_ADJ=high"}, score: 900, argv: []string{"/sbin/init"}, warn: "$OOMGUARD_OOM_SCORE_ADJ=high ignored"},
		{name: "bad group", args: []string{"--oom-group", "maybe"}, score: 900, argv: []string{"/sbin/init"}, warn: "want 0 or 1"},
		{name: "missing value", args: []string{"--oom-score-adj"}, score: 900, argv: []string{"/sbin/init"}, warn: "needs a value"},
		{name: "unknown flag", args: []string{"--frobnicate", "/init"}, score: 900, argv: []string{"/init"}},
		{name: "negative", args: []string{"-s", "-500", "--allow-lower"}, score: -500, lower: true, argv: []string{"/sbin/init"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var warns []string
			o := parse(tc.args, tc.env, func(s string) { warns = append(warns, s) })
			group := ""
			if o.group != nil {
				group = map[bool]string{true: "1", false: "0"}[*o.group]
			}
			if *o.score != tc.score || group != tc.group || o.allowLower != tc.lower || !slices.Equal(o.argv, tc.argv) {
				t.Fatalf("got score=%d group=%q lower=%v argv=%q", *o.score, group, o.allowLower, o.argv)
			}
			if tc.warn == "" && len(warns) > 0 || tc.warn != "" && (len(warns) != 1 || !strings.Contains(warns[0], tc.warn)) {
				t.Fatalf("warnings %q, want one containing %q", warns, tc.warn)
			}
		})
	}
}

// fakeOps records what run does; files maps paths to contents or errors.
type fakeOps struct {
	files    map[string]string
	errs     map[string]error
	writes   map[string]string
	execErr  error
	execPath string
	execArgv []string
	execEnv  []string
	msgs     []string
	out      []string
	pid1     bool
}

func newFake() *fakeOps {
	return &fakeOps{files: map[string]string{scoreFile: "0\n"}, errs: map[string]error{}, writes: map[string]string{}, pid1: true}
}

func (f *fakeOps) readFile(p string) ([]byte, error) {
	if err := f.errs[p]; err != nil {
		return nil, err
	}
	if c, ok := f.files[p]; ok {
		return []byte(c), nil
	}
	return nil, syscall.ENOENT
}

func (f *fakeOps) writeFile(p string, d []byte) error {
	if err := f.errs[p]; err != nil {
		return err
	}
	f.writes[p] = string(d)
	return nil
}

func (f *fakeOps) exec(p string, argv, env []string) error {
	f.execPath, f.execArgv, f.execEnv = p, argv, env
	if f.execErr != nil {
		return f.execErr
	}
	panic(execed{}) // a successful execve does not return
}

type execed struct{}

// run calls the real run; an exec that succeeded ends it as it would the process.
func (f *fakeOps) run(args, env []string) (code int) {
	defer func() {
		if r := recover(); r != nil {
			if _, ok := r.(execed); !ok {
				panic(r)
			}
			code = -1
		}
	}()
	pid := 4242
	if f.pid1 {
		pid = 1
	}
	return run(args, env, pid, f)
}

func (f *fakeOps) access(p string) error {
	if _, ok := f.files[p]; ok {
		return nil
	}
	return syscall.ENOENT
}

func (f *fakeOps) write(fd int, m string) {
	if fd == 1 {
		f.out = append(f.out, m)
	} else {
		f.msgs = append(f.msgs, m)
	}
}

func TestRun(t *testing.T) {
	env := []string{"container=podman", "NOTIFY_SOCKET=/run/notify", "LISTEN_FDS=2", "PATH=/usr/bin:/bin"}
	t.Run("sets and execs", func(t *testing.T) {
		f := newFake()
		f.run([]string{"oomguard-init", "/lib/systemd/systemd", "--unit=x"}, env)
		if f.writes[scoreFile] != "900\n" || f.execPath != "/lib/systemd/systemd" ||
			!slices.Equal(f.execArgv, []string{"/lib/systemd/systemd", "--unit=x"}) || !slices.Equal(f.execEnv, env) {
			t.Fatalf("writes %v exec %q %q %q", f.writes, f.execPath, f.execArgv, f.execEnv)
		}
	})
	t.Run("refuses to lower", func(t *testing.T) {
		f := newFake()
		f.files[scoreFile] = "900\n"
		f.run([]string{"oomguard-init", "-s", "100"}, nil)
		if _, wrote := f.writes[scoreFile]; wrote || f.execPath != "/sbin/init" || !strings.Contains(f.msgs[0], "not lowering it to 100") {
			t.Fatalf("writes %v exec %q msgs %q", f.writes, f.execPath, f.msgs)
		}
	})
	t.Run("lowering refused by the kernel still boots", func(t *testing.T) {
		f := newFake()
		f.files[scoreFile] = "900\n"
		f.errs[scoreFile] = syscall.EACCES
		f.run([]string{"oomguard-init", "-s", "-500", "--allow-lower", "/init"}, nil)
		if f.execPath != "/init" || len(f.msgs) != 1 || !strings.Contains(f.msgs[0], "CAP_SYS_RESOURCE") {
			t.Fatalf("exec %q msgs %q", f.execPath, f.msgs)
		}
	})
	t.Run("no proc still boots", func(t *testing.T) {
		f := newFake()
		delete(f.files, scoreFile)
		f.errs[scoreFile] = syscall.ENOENT
		f.run([]string{"oomguard-init", "-g", "0"}, nil)
		if f.execPath != "/sbin/init" || len(f.msgs) != 2 {
			t.Fatalf("exec %q msgs %q", f.execPath, f.msgs)
		}
	})
	t.Run("group on own cgroup", func(t *testing.T) {
		f := newFake()
		f.files["/proc/self/cgroup"] = "0::/\n"
		f.run([]string{"oomguard-init", "--oom-group", "0"}, nil)
		if f.writes["/sys/fs/cgroup/memory.oom.group"] != "0\n" {
			t.Fatalf("writes %v", f.writes)
		}
		f = newFake()
		f.files["/proc/self/cgroup"] = "0::/kubepods/pod1/ctr\n"
		f.errs["/sys/fs/cgroup/kubepods/pod1/ctr/memory.oom.group"] = syscall.EROFS
		f.run([]string{"oomguard-init", "--oom-group", "1"}, nil)
		if len(f.msgs) != 1 || !strings.Contains(f.msgs[0], "read-only cgroup filesystem") || f.execPath != "/sbin/init" {
			t.Fatalf("msgs %q", f.msgs)
		}
		f = newFake()
		f.files["/proc/self/cgroup"] = "4:memory:/x\n1:name=systemd:/x\n"
		f.run([]string{"oomguard-init", "--oom-group", "1"}, nil)
		if len(f.msgs) != 1 || !strings.Contains(f.msgs[0], "not on cgroup v2") {
			t.Fatalf("msgs %q", f.msgs)
		}
	})
	t.Run("PATH lookup", func(t *testing.T) {
		f := newFake()
		f.files["/bin/systemd"] = ""
		f.run([]string{"oomguard-init", "systemd"}, env)
		if f.execPath != "/bin/systemd" || f.execArgv[0] != "systemd" {
			t.Fatalf("exec %q %q", f.execPath, f.execArgv)
		}
	})
	for _, tc := range []struct {
		name string
		err  error
		code int
		msg  string
	}{
		{"missing", syscall.ENOENT, 127, "oomguard-init: /nope: no such file or directory"},
		{"not executable", syscall.EACCES, 126, "oomguard-init: /nope: permission denied"},
		{"bad format", syscall.ENOEXEC, 126, "oomguard-init: /nope: exec format error"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := newFake()
			f.execErr = tc.err
			if code := f.run([]string{"oomguard-init", "/nope"}, nil); code != tc.code || f.msgs[len(f.msgs)-1] != tc.msg {
				t.Fatalf("exit %d msgs %q", code, f.msgs)
			}
		})
	}
	t.Run("help and version on stdout, nothing run", func(t *testing.T) {
		for _, a := range []string{"--help", "-h", "--version"} {
			f := newFake()
			if code := f.run([]string{"oomguard-init", a}, nil); code != 0 || f.execPath != "" || len(f.out) != 1 || len(f.writes) != 0 {
				t.Fatalf("%s: exit %d exec %q out %q writes %v", a, code, f.execPath, f.out, f.writes)
			}
		}
	})
	t.Run("an unknown flag starts no init when not PID 1", func(t *testing.T) {
		f := newFake()
		f.pid1 = false
		if code := f.run([]string{"oomguard-init", "--frobnicate", "/init"}, nil); code != 2 || f.execPath != "" || len(f.writes) != 0 ||
			!strings.Contains(f.msgs[0], "unknown flag --frobnicate") {
			t.Fatalf("exit %d exec %q msgs %q", code, f.execPath, f.msgs)
		}
	})
	t.Run("an unknown flag as PID 1 still boots", func(t *testing.T) {
		f := newFake()
		f.run([]string{"oomguard-init", "--frobnicate", "/init"}, nil)
		if f.execPath != "/init" || f.writes[scoreFile] != "900\n" || !strings.Contains(f.msgs[0], "unknown flag --frobnicate") {
			t.Fatalf("exec %q writes %v msgs %q", f.execPath, f.writes, f.msgs)
		}
	})
	t.Run("not in PATH", func(t *testing.T) {
		f := newFake()
		if code := f.run([]string{"oomguard-init", "nosuch"}, env); code != 127 || f.execPath != "" || !strings.Contains(f.msgs[0], "nosuch: no such file") {
			t.Fatalf("exit %d msgs %q", code, f.msgs)
		}
	})
}

func TestItoaAtoi(t *testing.T) {
	for _, n := range []int{0, 1, -1, 900, -1000, 1000, 123456} {
		if m, ok := atoi(itoa(n)); !ok || m != n {
			t.Errorf("round trip %d: %d %v", n, m, ok)
		}
	}
	for _, bad := range []string{"", "-", "+", "1a", "0x10", "12345678"} {
		if _, ok := atoi(bad); ok {
			t.Errorf("atoi(%q) accepted", bad)
		}
	}
}

// The policy's command rule looks past the shim to the program it starts,
// so it must know which of the shim's flags take a value.
func TestPolicySeesPastTheShim(t *testing.T) {
	for _, tc := range []struct {
		flag   string
		valued bool
	}{
		{"--oom-score-adj", true}, {"-s", true}, {"--score", true}, {"--oom-group", true}, {"-g", true},
		{"--allow-lower", false},
	} {
		o := parse([]string{tc.flag, "1", "/sbin/init"}, nil, func(string) {})
		if o.unknown != "" {
			t.Fatalf("the shim does not know %s", tc.flag)
		}
		if consumed := o.argv[0] == "/sbin/init"; consumed != tc.valued {
			t.Fatalf("%s: the shim takes a value: %v; the table says %v", tc.flag, consumed, tc.valued)
		}
		argv := []string{"/.oomguard/oomguard-init", tc.flag, "1", "/sbin/init"}
		want := "/sbin/init"
		if !tc.valued {
			want = "1"
		}
		if got := policy.Program(argv); got != want {
			t.Errorf("policy.Program(%q) = %q, want %q: its list of the shim's flags is stale", argv, got, want)
		}
	}
}
