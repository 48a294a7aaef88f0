package vm

import (
	"bufio"
	"fmt"
	"io"
	"os"
	"path"
	"sort"
	"strings"
)

// archive is an initramfs being assembled: a newc cpio of directories,
// files and symlinks, written in path order so every parent comes first.
type archive struct {
	entries map[string]entry
}

type entry struct {
	mode uint32 // file type and permissions, as in stat(2)
	data []byte // file content, or a symlink's target
	src  string // host file to read the content from when data is nil
}

const (
	sIFDIR = 0o040000
	sIFREG = 0o100000
	sIFLNK = 0o120000
)

func newArchive() *archive { return &archive{entries: map[string]entry{}} }

func (a *archive) mkdirAll(p string) {
	for p = path.Clean("/" + p); p != "/"; p = path.Dir(p) {
		if _, ok := a.entries[p]; ok {
			return
		}
		a.entries[p] = entry{mode: sIFDIR | 0o755}
	}
}

// file adds content at p.
func (a *archive) file(p string, data []byte, perm uint32) {
	p = path.Clean("/" + p)
	a.mkdirAll(path.Dir(p))
	a.entries[p] = entry{mode: sIFREG | perm, data: data}
}

// copyFile adds the host file src at p, keeping its permissions.
func (a *archive) copyFile(p, src string) error {
	st, err := os.Stat(src)
	if err != nil {
		return err
	}
	p = path.Clean("/" + p)
	a.mkdirAll(path.Dir(p))
	a.entries[p] = entry{mode: sIFREG | uint32(st.Mode().Perm()), src: src}
	return nil
}

func (a *archive) symlink(p, target string) {
	p = path.Clean("/" + p)
	a.mkdirAll(path.Dir(p))
	a.entries[p] = entry{mode: sIFLNK | 0o777, data: []byte(target)}
}

// copyTree adds the host directory src below p: files, dirs and symlinks.
func (a *archive) copyTree(p, src string) error {
	return walk(src, func(rel string, fi os.FileInfo) error {
		dst := path.Join(p, rel)
		switch {
		case fi.Mode()&os.ModeSymlink != 0:
			t, err := os.Readlink(path.Join(src, rel))
			if err != nil {
				return err
			}
			a.symlink(dst, t)
		case fi.IsDir():
			a.mkdirAll(dst)
			e := a.entries[path.Clean("/"+dst)]
			e.mode = sIFDIR | uint32(fi.Mode().Perm())
			a.entries[path.Clean("/"+dst)] = e
		case fi.Mode().IsRegular():
			return a.copyFile(dst, path.Join(src, rel))
		}
		return nil
	})
}

func walk(root string, fn func(rel string, fi os.FileInfo) error) error {
	var rec func(rel string) error
	rec = func(rel string) error {
		ents, err := os.ReadDir(path.Join(root, rel))
		if err != nil {
			return err
		}
		for _, e := range ents {
			r := path.Join(rel, e.Name())
			fi, err := os.Lstat(path.Join(root, r))
			if err != nil {
				return err
			}
			if err := fn(r, fi); err != nil {
				return err
			}
			if fi.IsDir() {
				if err := rec(r); err != nil {
					return err
				}
			}
		}
		return nil
	}
	return rec("")
}

// writeTo writes the archive in the newc format the kernel unpacks.
func (a *archive) writeTo(w io.Writer) error {
	bw := bufio.NewWriterSize(w, 1<<20)
	names := make([]string, 0, len(a.entries))
	for n := range a.entries {
		names = append(names, n)
	}
	sort.Strings(names)
	ino := uint32(1)
	for _, n := range names {
		e := a.entries[n]
		data := e.data
		if e.src != "" {
			var err error
			if data, err = os.ReadFile(e.src); err != nil {
				return err
			}
		}
		if err := writeEntry(bw, strings.TrimPrefix(n, "/"), e.mode, ino, data); err != nil {
			return err
		}
		ino++
	}
	if err := writeEntry(bw, "TRAILER!!!", 0, 0, nil); err != nil {
		return err
	}
	return bw.Flush()
}

func writeEntry(w io.Writer, name string, mode, ino uint32, data []byte) error {
	nlink := 1
	if mode&sIFDIR == sIFDIR && mode&sIFREG == 0 {
		nlink = 2
	}
	hdr := fmt.Sprintf("070701%08X%08X%08X%08X%08X%08X%08X%08X%08X%08X%08X%08X%08X",
		ino, mode, 0, 0, nlink, 0, len(data), 0, 0, 0, 0, len(name)+1, 0)
	buf := append([]byte(hdr), name...)
	buf = append(buf, 0)
	buf = pad4(buf)
	if _, err := w.Write(buf); err != nil {
		return err
	}
	if _, err := w.Write(data); err != nil {
		return err
	}
	_, err := w.Write(make([]byte, (4-len(data)%4)%4))
	return err
}

func pad4(b []byte) []byte {
	for len(b)%4 != 0 {
		b = append(b, 0)
	}
	return b
}
