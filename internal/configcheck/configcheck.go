// Package configcheck is the `validate` command every oomguard program that
// reads the configuration has: check a file before it ships.
package configcheck

import (
	"context"
	"errors"
	"fmt"

	"github.com/oomguard/oomguard/config"
	"github.com/oomguard/oomguard/internal/cli"
	"github.com/oomguard/oomguard/internal/escape"
)

// Command is `PROGRAM validate FILE`: 0 and the file's hash when it
// validates (the hash oomguard_config_info shows once it is in force), 1
// and every problem when it does not.
func Command() *cli.Command {
	return &cli.Command{Name: "validate", Args: "FILE", MinArgs: 1, MaxArgs: 1,
		Help: "Check a configuration file as the programs load it: exit 0 and print its\n" +
			"hash (oomguard_config_info's, once in force), or exit 1 and say what is wrong.",
		Run: func(_ context.Context, args []string, s cli.IO) int {
			c, err := config.Load(args[0])
			if err != nil {
				for _, line := range problems(err) {
					fmt.Fprintf(s.Stderr, "invalid: %s\n", escape.Terminal(line))
				}
				return 1
			}
			fmt.Fprintf(s.Stdout, "valid: %s hash %s, %d rules\n", escape.Terminal(args[0]), c.Hash, len(c.Rules))
			return 0
		}}
}

// problems are err's, a line each: validation finds them all at once.
func problems(err error) []string {
	var le *config.LoadError
	if !errors.As(err, &le) {
		return []string{err.Error()}
	}
	joined, ok := le.Err.(interface{ Unwrap() []error })
	if !ok {
		return []string{err.Error()}
	}
	var out []string
	for _, e := range joined.Unwrap() {
		out = append(out, "config "+le.Path+": "+e.Error())
	}
	return out
}
