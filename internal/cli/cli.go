// Package cli is the one frame every oomguard command runs in, on the
// standard library's flag package, so that all of them behave alike: -h and
// --help print the usage (every subcommand and its flags) on stdout and exit
// 0; a usage error says what was wrong on stderr and exits 2; --version
// answers everywhere; flags are written --name and documented by their
// definitions. oomguard-init, on package syscall alone, follows the same
// rules by hand.
package cli

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"slices"
	"strings"

	"github.com/oomguard/oomguard/internal/version"
)

// ExitUsage is the exit status of a usage error, in every command.
const ExitUsage = 2

// IO is a command's standard streams.
type IO struct {
	Stdin          io.Reader
	Stdout, Stderr io.Writer
}

// Command is a program or one of its subcommands.
type Command struct {
	Name string // "oomguard-nri", or "install" below it
	// Summary is what the program is, at the head of its usage (a program only).
	Summary string
	// Help is what this command line does, under its synopsis.
	Help string
	// Args names the positional arguments in the synopsis ("[REF...]",
	// "IMAGE"); a command without Args takes none.
	Args string
	// MinArgs and MaxArgs bound the positional arguments (MaxArgs < 0: no
	// bound) when Args is set.
	MinArgs, MaxArgs int
	// Interspersed lets flags come after positional arguments.
	Interspersed bool
	// Flags defines the command's flags.
	Flags func(fs *flag.FlagSet)
	// Run does the work and returns the exit status; nil for a command that
	// only holds subcommands.
	Run func(ctx context.Context, args []string, io IO) int
	// Commands are its subcommands.
	Commands []*Command

	parent *Command
}

func (c *Command) path() string {
	if c.parent == nil {
		return c.Name
	}
	return c.parent.path() + " " + c.Name
}

func (c *Command) link() {
	for _, s := range c.Commands {
		s.parent = c
		s.link()
	}
}

func (c *Command) sub(name string) *Command {
	for _, s := range c.Commands {
		if s.Name == name {
			return s
		}
	}
	return nil
}

func isHelp(a string) bool { return a == "-h" || a == "-help" || a == "--help" || a == "help" }

func isVersion(a string) bool { return a == "--version" || a == "-version" || a == "version" }

// Main runs prog with args (without the program's name) and returns the
// exit status.
func Main(ctx context.Context, prog *Command, args []string, stdio IO) int {
	prog.link()
	if len(args) == 1 && isVersion(args[0]) {
		fmt.Fprintln(stdio.Stdout, version.String(prog.Name))
		return 0
	}
	c := prog
	for len(args) > 0 {
		if isHelp(args[0]) {
			if len(args) > 1 && c.sub(args[1]) != nil { // "help install"
				c = c.sub(args[1])
			}
			c.WriteUsage(stdio.Stdout, c == prog)
			return 0
		}
		s := c.sub(args[0])
		if s == nil {
			break
		}
		c, args = s, args[1:]
	}
	if c.Run == nil {
		if len(args) == 0 {
			c.WriteUsage(stdio.Stderr, c == prog)
			return ExitUsage
		}
		return Usagef(stdio.Stderr, c, "unknown command %q", args[0])
	}
	fs := c.flagSet()
	var pos []string
	for {
		err := fs.Parse(args)
		if errors.Is(err, flag.ErrHelp) {
			c.WriteUsage(stdio.Stdout, false)
			return 0
		}
		if err != nil {
			return Usagef(stdio.Stderr, c, "%v", err)
		}
		if !c.Interspersed || fs.NArg() == 0 {
			pos = append(pos, fs.Args()...)
			break
		}
		pos = append(pos, fs.Arg(0))
		args = fs.Args()[1:]
	}
	if c.Args == "" && len(pos) > 0 {
		return Usagef(stdio.Stderr, c, "unexpected argument %q", pos[0])
	}
	if c.Args != "" && (len(pos) < c.MinArgs || (c.MaxArgs >= 0 && len(pos) > c.MaxArgs)) {
		return Usagef(stdio.Stderr, c, "want %s, got %d arguments", c.Args, len(pos))
	}
	return c.Run(ctx, pos, stdio)
}

func (c *Command) flagSet() *flag.FlagSet {
	fs := flag.NewFlagSet(c.path(), flag.ContinueOnError)
	fs.SetOutput(io.Discard) // errors are reported by Main, help by WriteUsage
	if c.Flags != nil {
		c.Flags(fs)
	}
	return fs
}

// Usagef reports a usage error of command c on w and returns ExitUsage.
func Usagef(w io.Writer, c *Command, format string, a ...any) int {
	fmt.Fprintf(w, "%s: %s\nRun '%s --help' for usage.\n", c.path(), fmt.Sprintf(format, a...), c.path())
	return ExitUsage
}

// WriteUsage writes c's usage: its synopsis and every subcommand's, then the
// flags of each; all of a program's when whole.
func (c *Command) WriteUsage(w io.Writer, whole bool) {
	cmds := []*Command{c}
	if whole || c.Run == nil {
		cmds = c.all()
	}
	if c.parent == nil && c.Summary != "" {
		fmt.Fprintf(w, "%s: %s\n\n", c.Name, strings.TrimSpace(c.Summary))
	}
	fmt.Fprintln(w, "Usage:")
	for _, s := range cmds {
		if s.Run == nil {
			continue
		}
		line := s.path()
		if s.Flags != nil {
			line += " [flags]"
		}
		if s.Args != "" {
			line += " " + s.Args
		}
		fmt.Fprintf(w, "  %s\n", line)
		fmt.Fprint(w, indent(s.Help, "      "))
	}
	if c.parent == nil {
		fmt.Fprintf(w, "  %s --version\n", c.Name)
	}
	for _, s := range cmds {
		fs := s.flagSet()
		n := 0
		fs.VisitAll(func(*flag.Flag) { n++ })
		if n == 0 {
			continue
		}
		fmt.Fprintf(w, "\nFlags of %s:\n", s.path())
		fs.VisitAll(func(f *flag.Flag) {
			arg, usage := flag.UnquoteUsage(f)
			line := "  --" + f.Name
			if arg != "" {
				line += " " + arg
			}
			fmt.Fprintln(w, line)
			if f.DefValue != "" && f.DefValue != "0" && f.DefValue != "false" && f.DefValue != "0s" && !strings.Contains(usage, "(default") {
				usage += fmt.Sprintf(" (default %s)", f.DefValue)
			}
			fmt.Fprint(w, indent(usage, "        "))
		})
	}
}

func (c *Command) all() []*Command {
	out := []*Command{c}
	for _, s := range c.Commands {
		out = append(out, s.all()...)
	}
	return out
}

// indent puts prefix before every line of s, ending it with a newline.
func indent(s, prefix string) string {
	if s == "" {
		return ""
	}
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	for i, l := range lines {
		lines[i] = prefix + l
	}
	return strings.Join(lines, "\n") + "\n"
}

// Names lists every command's path in prog, for tests and documentation.
func Names(prog *Command) []string {
	prog.link()
	var out []string
	for _, c := range prog.all() {
		out = append(out, c.path())
	}
	slices.Sort(out)
	return out
}

// IsTerminal reports whether w is a terminal that may take colours and
// progress bars (not when NO_COLOR is set).
func IsTerminal(w io.Writer) bool {
	f, ok := w.(*os.File)
	if !ok || os.Getenv("NO_COLOR") != "" {
		return false
	}
	st, err := f.Stat()
	return err == nil && st.Mode()&os.ModeCharDevice != 0
}
