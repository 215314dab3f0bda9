//go:build !linux

package exepages

// Drop does nothing outside Linux: the mechanism it uses
// (fault-around, madvise, the page cache) is Linux's.
func Drop() (int64, error) { return 0, nil }
