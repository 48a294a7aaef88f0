package stricttoml

import (
	"strings"
	"testing"
)

func TestDecode(t *testing.T) {
	type doc struct {
		Name  string `toml:"name"`
		Table struct {
			N int `toml:"n"`
		} `toml:"table"`
	}
	for _, tc := range []struct {
		in, err string
	}{
		{"name = 'a'\n[table]\nn = 1\n", ""},
		{"name = \n", "invalid TOML at line 1"},
		{"name = 1\n", "invalid TOML"},
		{"nmae = 'a'\n", `unknown key "nmae"`},
		{"[table]\nm = 1\nk = 2\n", `unknown key "table.m", "table.k"`},
	} {
		var d doc
		err := Decode([]byte(tc.in), &d)
		switch {
		case tc.err == "" && err != nil:
			t.Errorf("%q: %v", tc.in, err)
		case tc.err != "" && (err == nil || !strings.Contains(err.Error(), tc.err)):
			t.Errorf("%q: error %v, want %q", tc.in, err, tc.err)
		}
	}
}
