package exepages

import (
	"bufio"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"
)

// Drop hands the pages of Portal's own executable that the
// start-up touched back to the kernel, so that resident memory follows the
// pages Portal goes on using rather than the whole binary.
//
// Every package's init runs before main, and they are spread over the
// whole 80 MB binary; the kernel maps each touched page with its
// neighbours (fault-around, 64 KiB) and reads ahead around each miss, so
// once main starts most of the binary is resident (about 60 MiB) and stays
// so. For each read-only mapping of the executable this advises
// MADV_RANDOM (no read-ahead and so fewer neighbours later) and
// MADV_DONTNEED (unmap: those pages are never written, so nothing is
// lost), then drops the executable's pages no process maps any more from
// the page cache (POSIX_FADV_DONTNEED): fault-around maps only pages in the
// cache, so from then on Portal maps the pages it touches. The price is a
// read from disk the first time each page is used again. Writable mappings
// (.data, .bss, the heap) are never touched.
//
// It returns the bytes of mappings it advised.
func Drop() (int64, error) {
	exe, err := os.Readlink("/proc/self/exe")
	if err != nil {
		return 0, err
	}
	maps, err := os.Open("/proc/self/maps")
	if err != nil {
		return 0, err
	}
	defer maps.Close()
	ranges, err := readOnlyMappings(maps, exe)
	if err != nil {
		return 0, fmt.Errorf("/proc/self/maps: %w", err)
	}
	var dropped int64
	for _, r := range ranges {
		for _, advice := range []int{unix.MADV_RANDOM, unix.MADV_DONTNEED} {
			if _, _, errno := unix.Syscall(unix.SYS_MADVISE, r.start, r.end-r.start, uintptr(advice)); errno != 0 {
				return dropped, fmt.Errorf("madvise %#x-%#x: %w", r.start, r.end, errno)
			}
		}
		dropped += int64(r.end - r.start)
	}
	f, err := os.Open(exe)
	if err != nil {
		return dropped, err
	}
	defer f.Close()
	if err := unix.Fadvise(int(f.Fd()), 0, 0, unix.FADV_DONTNEED); err != nil {
		return dropped, fmt.Errorf("fadvise %s: %w", exe, err)
	}
	return dropped, nil
}

// addrRange is one mapping, [start, end).
type addrRange struct{ start, end uintptr }

// readOnlyMappings returns the private mappings of file in a
// /proc/<pid>/maps listing that are neither writable nor shared: the
// executable's text and read-only data.
func readOnlyMappings(maps io.Reader, file string) ([]addrRange, error) {
	var out []addrRange
	sc := bufio.NewScanner(maps)
	for sc.Scan() {
		// address perms offset dev inode pathname; the pathname may hold
		// spaces (and ends in " (deleted)" once the file is replaced).
		fields := strings.SplitN(sc.Text(), " ", 6)
		if len(fields) < 6 || strings.TrimLeft(fields[5], " ") != file {
			continue
		}
		perms := fields[1]
		if len(perms) != 4 || perms[0] != 'r' || perms[1] != '-' || perms[3] != 'p' {
			continue
		}
		lo, hi, ok := strings.Cut(fields[0], "-")
		if !ok {
			return nil, fmt.Errorf("bad address range %q", fields[0])
		}
		start, err := strconv.ParseUint(lo, 16, 0)
		if err != nil {
			return nil, fmt.Errorf("bad address range %q: %w", fields[0], err)
		}
		end, err := strconv.ParseUint(hi, 16, 0)
		if err != nil || end < start {
			return nil, fmt.Errorf("bad address range %q", fields[0])
		}
		out = append(out, addrRange{uintptr(start), uintptr(end)})
	}
	return out, sc.Err()
}
