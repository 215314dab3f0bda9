package engine

import (
	"cmp"
	"fmt"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"unicode/utf8"
)

// Bounds of a rendered message. A message goes into the admission response
// (the API server keeps 4 KiB of warnings per request), the log, the
// findings, Alertmanager and action requests, so a rule must not make it as
// large as the objects it reads. A hole is bounded on its own so the text
// after a large value survives.
const (
	// MaxMessageBytes bounds a rendered message.
	MaxMessageBytes = 4096
	// MaxHoleBytes bounds what one {{ }} hole adds to it.
	MaxHoleBytes = 1024
	// MaxMessageHoles bounds the holes of one message; no shipped rule
	// needs more than a handful.
	MaxMessageHoles = 32
)

// truncatedMark ends a message or hole that was cut.
const truncatedMark = " [truncated]"

// capped is a strings.Builder that keeps at most max bytes, marker
// included, and drops the rest, so a value is never printed past it.
type capped struct {
	b   strings.Builder
	max int
	cut bool
}

func (c *capped) WriteString(s string) {
	if c.cut {
		return
	}
	if room := c.max - c.b.Len(); len(s) > room {
		c.b.WriteString(s[:room])
		c.cut = true
		return
	}
	c.b.WriteString(s)
}

// String returns what was kept, ending in the marker when something was
// dropped.
func (c *capped) String() string {
	s := c.b.String()
	if !c.cut {
		return s
	}
	n := max(c.max-len(truncatedMark), 0)
	for n > 0 && !utf8.RuneStart(s[n]) {
		n--
	}
	return s[:n] + truncatedMark
}

// bounded is s cut to MaxMessageBytes.
func bounded(s string) string {
	if len(s) <= MaxMessageBytes {
		return s
	}
	c := capped{max: MaxMessageBytes}
	c.WriteString(s)
	return c.String()
}

// withNote is msg with note appended, cut so the note survives within
// MaxMessageBytes.
func withNote(msg, note string) string {
	if len(msg)+len(note) <= MaxMessageBytes {
		return msg + note
	}
	c := capped{max: MaxMessageBytes - len(note)}
	c.WriteString(msg)
	return c.String() + note
}

// printValue writes v as fmt's %v would (maps with sorted keys), except
// that numbers read as people write them (1073741824, not 1.073741824e+09)
// and it stops once w is full: a hole over a megabyte object prints a
// kilobyte, it never builds the megabyte first.
func printValue(w *capped, v any) {
	if w.cut {
		return
	}
	switch x := v.(type) {
	case nil:
		w.WriteString("<nil>")
	case string:
		w.WriteString(x)
	case bool:
		w.WriteString(strconv.FormatBool(x))
	case float64:
		w.WriteString(strconv.FormatFloat(x, 'f', -1, 64))
	case int:
		w.WriteString(strconv.Itoa(x))
	case int64:
		w.WriteString(strconv.FormatInt(x, 10))
	case []any:
		w.WriteString("[")
		for i, e := range x {
			if w.cut {
				return
			}
			if i > 0 {
				w.WriteString(" ")
			}
			printValue(w, e)
		}
		w.WriteString("]")
	case map[string]any:
		keys := make([]string, 0, len(x))
		for k := range x {
			keys = append(keys, k)
		}
		slices.Sort(keys)
		w.WriteString("map[")
		for i, k := range keys {
			if w.cut {
				return
			}
			if i > 0 {
				w.WriteString(" ")
			}
			w.WriteString(k)
			w.WriteString(":")
			printValue(w, x[k])
		}
		w.WriteString("]")
	default:
		printReflect(w, reflect.ValueOf(v))
	}
}

// printReflect prints the values expr-lang makes besides JSON's: typed
// slices (1..3 is a []int) and maps with other keys (groupBy's).
func printReflect(w *capped, rv reflect.Value) {
	switch rv.Kind() {
	case reflect.String:
		w.WriteString(rv.String())
	case reflect.Slice, reflect.Array:
		w.WriteString("[")
		for i := range rv.Len() {
			if w.cut {
				return
			}
			if i > 0 {
				w.WriteString(" ")
			}
			printValue(w, rv.Index(i).Interface())
		}
		w.WriteString("]")
	case reflect.Map:
		keys := rv.MapKeys()
		names := make([]string, len(keys))
		for i, k := range keys {
			names[i] = fmt.Sprint(k.Interface())
		}
		order := make([]int, len(keys))
		for i := range order {
			order[i] = i
		}
		slices.SortFunc(order, func(a, b int) int { return cmp.Compare(names[a], names[b]) })
		w.WriteString("map[")
		for n, i := range order {
			if w.cut {
				return
			}
			if n > 0 {
				w.WriteString(" ")
			}
			w.WriteString(names[i])
			w.WriteString(":")
			printValue(w, rv.MapIndex(keys[i]).Interface())
		}
		w.WriteString("]")
	default:
		// Scalars from helpers (a duration, a date): small.
		w.WriteString(fmt.Sprint(rv.Interface()))
	}
}
