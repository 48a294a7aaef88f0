package changes

import (
	"fmt"
	"slices"
)

// Value is a setting of the node that is read and written whole, such as a
// sysctl.
type Value struct {
	Key string // as the record names it, e.g. "vm.oom_dump_tasks"
	Get func() (string, error)
	Put func(string) error
	// Same compares two values as the setting means them; equal strings when nil.
	Same func(a, b string) bool
}

func (v Value) same(a, b string) bool {
	if v.Same != nil {
		return v.Same(a, b)
	}
	return a == b
}

// Before is what the value was before oomguard first set it, if it did.
func (s *Set) Before(key string) (string, bool) { v, ok := s.rec.Before[key]; return v, ok }

// Keys are the values the record says oomguard set.
func (s *Set) Keys() []string {
	keys := make([]string, 0, len(s.rec.Set))
	for k := range s.rec.Set {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return keys
}

// SetValue makes v want, recording what it was the first time, before it
// changes it.
func (s *Set) SetValue(v Value, want string) error {
	cur, err := v.Get()
	if err != nil {
		return fmt.Errorf("read %s: %w", v.Key, err)
	}
	if s.rec.Before == nil {
		s.rec.Before, s.rec.Set = map[string]string{}, map[string]string{}
	}
	if _, ok := s.rec.Before[v.Key]; !ok {
		s.rec.Before[v.Key] = cur
	}
	s.rec.Set[v.Key] = want
	if v.same(cur, want) {
		fmt.Fprintf(s.out, "unchanged %s = %s\n", v.Key, cur)
		return nil
	}
	if s.dryRun {
		s.changed = true
		fmt.Fprintf(s.out, "would: set %s = %s (now %s)\n", v.Key, want, cur)
		return nil
	}
	if err := s.persist(); err != nil {
		return err
	}
	if err := v.Put(want); err != nil {
		return fmt.Errorf("set %s = %s: %w", v.Key, want, err)
	}
	s.undo = append(s.undo, func() error { return v.Put(cur) })
	s.changed = true
	fmt.Fprintf(s.out, "set %s = %s (was %s)\n", v.Key, want, cur)
	return nil
}

// RestoreValue puts v back as it was before oomguard set it, unless
// someone changed it since, and forgets it.
func (s *Set) RestoreValue(v Value) error {
	cur, err := v.Get()
	if err != nil {
		return fmt.Errorf("read %s: %w", v.Key, err)
	}
	before, set := s.rec.Before[v.Key], s.rec.Set[v.Key]
	switch {
	case !v.same(cur, set):
		fmt.Fprintf(s.out, "left %s = %s alone: it changed since (oomguard set %s, it was %s)\n", v.Key, cur, set, before)
	case s.dryRun:
		s.changed = true
		fmt.Fprintf(s.out, "would: restore %s = %s\n", v.Key, before)
	default:
		if err := v.Put(before); err != nil {
			return fmt.Errorf("restore %s = %s: %w", v.Key, before, err)
		}
		s.undo = append(s.undo, func() error { return v.Put(cur) })
		s.changed = true
		fmt.Fprintf(s.out, "restored %s = %s\n", v.Key, before)
	}
	delete(s.rec.Set, v.Key)
	delete(s.rec.Before, v.Key)
	return nil
}
