// Package testlog holds what components log during a test, for the test
// to read while they go on writing from their own goroutines.
package testlog

import (
	"bytes"
	"sync"
)

// Buffer is an io.Writer (a slog handler's destination, say) whose
// contents can be read while other goroutines write to it.
type Buffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (b *Buffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.Write(p)
}

// String returns everything written so far.
func (b *Buffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.String()
}
