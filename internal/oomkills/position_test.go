package oomkills

import "testing"

// The position kept beside the lock reads back; one from another boot is
// none.
func TestPositionFile(t *testing.T) {
	dir := t.TempDir()
	w, err := openPosition(dir, position{Boot: "a"})
	if err != nil {
		t.Fatal(err)
	}
	w.clean(7) // within the second: kept in memory
	w.reported(9)
	w.clean(12) // within the second of the last write: written at close
	w.close()
	if p, ok := readPosition(dir, "a"); !ok || p.Clean != 12 || p.Reported != 9 {
		t.Fatalf("position %+v %v, want clean 12 reported 9", p, ok)
	}
	if _, ok := readPosition(dir, "b"); ok {
		t.Fatal("a position of another boot was taken")
	}
}
