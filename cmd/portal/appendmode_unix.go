//go:build unix

package main

import (
	"os"

	"golang.org/x/sys/unix"
)

// appending reports whether f was opened for appending (a shell's ">>"),
// or cannot tell: every write then lands at the file's end, wherever other
// writers have taken it.
func appending(f *os.File) bool {
	rc, err := f.SyscallConn()
	if err != nil {
		return true
	}
	flags := 0
	cerr := rc.Control(func(fd uintptr) {
		flags, err = unix.FcntlInt(fd, unix.F_GETFL, 0)
	})
	return cerr != nil || err != nil || flags&unix.O_APPEND != 0
}
