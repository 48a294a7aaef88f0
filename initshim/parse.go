package initshim

// Environment variables an operator sets per pod; they win over the flags,
// which are baked into the image's entrypoint.
const (
	envScore = "OOMGUARD_OOM_SCORE_ADJ"
	envGroup = "OOMGUARD_OOM_GROUP"
)

const defaultScore = 900

const defaultTarget = "/sbin/init"

// Version is the shim's, as imagepatch's built-in spec embeds it (a test
// holds them equal): the shim is not stamped with the commit, so that images
// patched with it do not change with every commit.
const Version = "4"

const usage = `Usage: oomguard-init [-s|--oom-score-adj N] [-g|--oom-group 0|1] [--allow-lower] [--] [TARGET [ARG...]]
Sets its oom_score_adj (default 900; $` + envScore + ` wins) and memory.oom.group
($` + envGroup + `), then execs TARGET (default ` + defaultTarget + `), keeping the pid.`

type options struct {
	score      *int
	group      *bool
	allowLower bool
	help       bool
	version    bool
	unknown    string // the first flag it does not know
	argv       []string
}

// parse reads flags up to the first non-flag or "--"; everything after is the
// target's argv. Bad flags and values are reported and ignored: the target
// must still run.
func parse(args, env []string, warn func(string)) options {
	score := defaultScore
	o := options{score: &score}
	i := 0
	for ; i < len(args); i++ {
		a := args[i]
		if a == "--" {
			i++
			break
		}
		if len(a) < 2 || a[0] != '-' {
			break
		}
		name, val, hasVal := a, "", false
		if j := indexByte(a, '='); j >= 0 {
			name, val, hasVal = a[:j], a[j+1:], true
		}
		value := func() (string, bool) {
			if hasVal {
				return val, true
			}
			if i+1 < len(args) {
				i++
				return args[i], true
			}
			warn("oomguard-init: " + name + " needs a value; ignored")
			return "", false
		}
		switch name {
		case "--oom-score-adj", "-s", "--score":
			if v, ok := value(); ok {
				if n, ok := parseScore(v, name, warn); ok {
					score = n
				}
			}
		case "--oom-group", "-g":
			if v, ok := value(); ok {
				if b, ok := parseBool(v, name, warn); ok {
					o.group = &b
				}
			}
		case "--allow-lower":
			o.allowLower = true
		case "-h", "--help":
			o.help = true
		case "--version":
			o.version = true
		default:
			if o.unknown == "" {
				o.unknown = a
			}
		}
	}
	if v, ok := lookupEnv(env, envScore); ok {
		if n, ok := parseScore(v, "$"+envScore, warn); ok {
			score = n
		}
	}
	if v, ok := lookupEnv(env, envGroup); ok {
		if b, ok := parseBool(v, "$"+envGroup, warn); ok {
			o.group = &b
		}
	}
	o.argv = args[i:]
	if len(o.argv) == 0 {
		o.argv = []string{defaultTarget}
	}
	return o
}

func parseScore(v, from string, warn func(string)) (int, bool) {
	n, ok := atoi(trimSpace(v))
	if !ok || n < -1000 || n > 1000 {
		warn("oomguard-init: " + from + "=" + v + " ignored: want an integer from -1000 to 1000")
		return 0, false
	}
	return n, true
}

func parseBool(v, from string, warn func(string)) (bool, bool) {
	switch trimSpace(v) {
	case "1", "true":
		return true, true
	case "0", "false":
		return false, true
	}
	warn("oomguard-init: " + from + "=" + v + " ignored: want 0 or 1")
	return false, false
}

func lookupEnv(env []string, key string) (string, bool) {
	for i := len(env) - 1; i >= 0; i-- { // the last definition wins, as in getenv(3)
		e := env[i]
		if len(e) > len(key) && e[len(key)] == '=' && e[:len(key)] == key {
			return e[len(key)+1:], true
		}
	}
	return "", false
}

func getenv(env []string, key string) string {
	v, _ := lookupEnv(env, key)
	return v
}

// atoi parses a decimal integer with an optional sign, without strconv.
func atoi(s string) (int, bool) {
	neg := false
	if s != "" && (s[0] == '-' || s[0] == '+') {
		neg, s = s[0] == '-', s[1:]
	}
	if s == "" || len(s) > 7 {
		return 0, false
	}
	n := 0
	for i := 0; i < len(s); i++ {
		if s[i] < '0' || s[i] > '9' {
			return 0, false
		}
		n = n*10 + int(s[i]-'0')
	}
	if neg {
		n = -n
	}
	return n, true
}

func itoa(n int) string {
	if n == 0 {
		return "0"
	}
	var b [20]byte
	i := len(b)
	neg := n < 0
	if neg {
		n = -n
	}
	for n > 0 {
		i--
		b[i] = byte('0' + n%10)
		n /= 10
	}
	if neg {
		i--
		b[i] = '-'
	}
	return string(b[i:])
}

func trimSpace(s string) string {
	for len(s) > 0 && (s[0] == ' ' || s[0] == '\n' || s[0] == '\t' || s[0] == '\r') {
		s = s[1:]
	}
	for len(s) > 0 && (s[len(s)-1] == ' ' || s[len(s)-1] == '\n' || s[len(s)-1] == '\t' || s[len(s)-1] == '\r') {
		s = s[:len(s)-1]
	}
	return s
}

func indexByte(s string, c byte) int {
	for i := 0; i < len(s); i++ {
		if s[i] == c {
			return i
		}
	}
	return -1
}
