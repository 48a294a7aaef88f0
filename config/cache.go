package config

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"regexp/syntax"
	"strings"
	"syscall"

	"github.com/oomguard/oomguard/internal/glob"
	"github.com/oomguard/oomguard/internal/safeio"
	"github.com/oomguard/oomguard/internal/version"
)

// FindCached is Find for a program run once for each container (the
// hook): a configuration whose text was parsed before is read from the
// form cached in dir (JSON, named by the text's SHA-256 and the program's
// version), a directory only its owner can enter, instead of parsed and
// validated again. dir "" or one that cannot be used is no cache.
func FindCached(flagValue, dir string) (*Config, error) {
	if dir == "" {
		return Find(flagValue)
	}
	p := Path(flagValue)
	b, err := read(p)
	if err != nil {
		if p == DefaultPath && flagValue == "" && errors.Is(err, fs.ErrNotExist) {
			c := Default()
			c.Missing = true
			return c, nil
		}
		return nil, &LoadError{Op: "read", Path: p, Err: err}
	}
	name := cacheName(dir, b)
	if c, ok := readCached(dir, name); ok {
		c.Hash = Hash(b)
		return c, nil
	}
	c, err := Parse(b)
	if err != nil {
		return nil, &LoadError{Op: "parse", Path: p, Strict: StrictIn(b), Err: err}
	}
	c.Compiled = compiledOf(c)
	writeCached(dir, name, c)
	return c, nil
}

// compiledOf compiles the expressions of the rules and the trusted
// namespaces that would be compiled to decide (Validate parsed them).
func compiledOf(c *Config) map[string]*syntax.Prog {
	progs := map[string]*syntax.Prog{}
	add := func(src string) {
		if prog, err := glob.CompileRegexp(src); err == nil {
			progs[src] = prog
		}
	}
	addGlob := func(_, _, g string) {
		if src, ok := glob.ProgramSource(g); ok {
			add(src)
		}
	}
	for _, g := range c.Annotations.TrustedNamespaces {
		addGlob("", "", g)
	}
	for _, r := range c.Rules {
		if r.Match.Command != "" {
			add(r.Match.Command)
		}
		r.Match.globs(addGlob)
	}
	return progs
}

// cacheName is where the form of the configuration text b is cached in dir.
func cacheName(dir string, b []byte) string {
	sum := sha256.Sum256(b)
	return filepath.Join(dir, "config-"+strings.ReplaceAll(version.Version, "/", "_")+"-"+hex.EncodeToString(sum[:])+".json")
}

// maxCached bounds a cached configuration's JSON.
const maxCached = 4 << 20

// readCached reads a configuration cached in dir, which must be this
// user's alone (what another user could write would be trusted as rules).
func readCached(dir, name string) (*Config, bool) {
	if !private(dir) {
		return nil, false
	}
	b, _, err := safeio.ReadData(name, maxCached)
	if err != nil {
		return nil, false
	}
	// Onto the defaults: a field this version has and the cache lacks
	// keeps its default, one it does not know fails the decoding.
	c := Default()
	d := json.NewDecoder(bytes.NewReader(b))
	d.DisallowUnknownFields()
	if err := d.Decode(c); err != nil {
		return nil, false
	}
	for _, prog := range c.Compiled {
		if glob.CheckProg(prog) != nil {
			return nil, false
		}
	}
	return c, true
}

// writeCached caches c in dir, made if missing, in place of any other
// configuration cached there.
func writeCached(dir, name string, c *Config) {
	if err := os.MkdirAll(dir, 0o700); err != nil || !private(dir) {
		return
	}
	b, err := json.Marshal(c)
	if err != nil {
		return
	}
	tmp, err := os.CreateTemp(dir, ".config-*")
	if err != nil {
		return
	}
	_, werr := tmp.Write(b)
	if cerr := tmp.Close(); werr != nil || cerr != nil || os.Rename(tmp.Name(), name) != nil {
		os.Remove(tmp.Name())
		return
	}
	old, _ := filepath.Glob(filepath.Join(dir, "config-*.json"))
	for _, o := range old {
		if o != name {
			os.Remove(o)
		}
	}
}

// private reports whether dir is a real directory of this user's that no
// one else may write to or enter.
func private(dir string) bool {
	fi, err := os.Lstat(dir)
	if err != nil || !fi.IsDir() || fi.Mode().Perm()&0o077 != 0 {
		return false
	}
	st, ok := fi.Sys().(*syscall.Stat_t)
	return ok && int(st.Uid) == os.Geteuid()
}
