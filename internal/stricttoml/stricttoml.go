// Package stricttoml decodes TOML the way every oomguard file is read: a
// syntax error names its line, and a key the target has no place for is an
// error, not silently ignored (a misspelt key would otherwise do nothing).
package stricttoml

import (
	"errors"
	"fmt"
	"strings"

	"github.com/BurntSushi/toml"
)

// Decode decodes data into v, naming the line of a syntax error and every
// key v has no place for.
func Decode(data []byte, v any) error {
	md, err := toml.Decode(string(data), v)
	if err != nil {
		var pe toml.ParseError
		if errors.As(err, &pe) {
			return fmt.Errorf("invalid TOML at line %d: %s", pe.Position.Line, pe.Message)
		}
		return fmt.Errorf("invalid TOML: %w", err)
	}
	if und := md.Undecoded(); len(und) > 0 {
		keys := make([]string, len(und))
		for i, k := range und {
			keys[i] = fmt.Sprintf("%q", k.String())
		}
		return fmt.Errorf("unknown key %s: check the spelling against the keys in docs/configuration.md", strings.Join(keys, ", "))
	}
	return nil
}
