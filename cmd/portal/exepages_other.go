//go:build !linux

package main

// dropExecutablePages does nothing outside Linux: the mechanism it uses
// (fault-around, madvise, the page cache) is Linux's.
func dropExecutablePages() (int64, error) { return 0, nil }
