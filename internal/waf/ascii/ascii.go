// Package ascii holds the byte scans Portal's WAF operators and
// transformations run on every argument, eight bytes at a time.
package ascii

import (
	"encoding/binary"
	"unicode/utf8"
	"unsafe"
)

// Is reports whether s is all ASCII. It reads eight bytes at a time: the
// filters and transformations call it once per rule and argument.
func Is(s string) bool {
	i := 0
	for ; i+8 <= len(s); i += 8 {
		if binary.LittleEndian.Uint64(unsafe.Slice(unsafe.StringData(s[i:]), 8))&0x8080808080808080 != 0 {
			return false
		}
	}
	for ; i < len(s); i++ {
		if s[i] >= utf8.RuneSelf {
			return false
		}
	}
	return true
}
