package cache

import (
	"encoding/json"
	"errors"
	"math/rand"
	"reflect"
	"runtime"
	"strings"
	"testing"
	"testing/quick"
)

// tricky are the pieces of string encoding/json does not copy as they are.
var tricky = []string{"a", "é", "😀", "<", ">", "&", `"`, `\`, "\b", "\f", "\n", "\r", "\t", "\x00", "\x1f", "\x7f",
	"\u2028", "\u2029", "\xff", "\xe2\x80", "\xed\xa0\x80", "\uFFFD"}

// spell sets every string reachable from v to a random run of tricky.
func spell(v reflect.Value, rnd *rand.Rand) {
	switch v.Kind() {
	case reflect.String:
		var b strings.Builder
		for range rnd.Intn(6) {
			b.WriteString(tricky[rnd.Intn(len(tricky))])
		}
		v.SetString(b.String())
	case reflect.Pointer:
		if !v.IsNil() {
			spell(v.Elem(), rnd)
		}
	case reflect.Slice:
		for i := range v.Len() {
			spell(v.Index(i), rnd)
		}
	case reflect.Struct:
		for i := range v.NumField() {
			spell(v.Field(i), rnd)
		}
	}
}

// TestEncodedSizeIsMarshalLength: the computed size is json.Marshal's
// length for tables with every field set at random (testing/quick fills
// fields added later too), with strings of every kind encoding/json
// escapes or replaces, and with empty parts.
func TestEncodedSizeIsMarshalLength(t *testing.T) {
	rnd := rand.New(rand.NewSource(1))
	check := func(tbl *Table) {
		t.Helper()
		body, err := json.Marshal(tbl)
		if err != nil {
			t.Fatal(err)
		}
		if got := tbl.EncodedSize(); got != len(body) {
			t.Fatalf("EncodedSize %d, json.Marshal %d bytes: %s", got, len(body), body)
		}
	}
	check(&Table{})
	check(&Table{Gateway: "a/b", Default: -1, Policies: []TablePolicy{{Exclusions: &Exclusions{}, RuleSet: &TableRuleSet{}}},
		Rows: []TableRow{{Path: &StringMatch{}}}})
	cfg := &quick.Config{Rand: rnd, MaxCount: 300}
	for i := range cfg.MaxCount {
		v, ok := quick.Value(reflect.TypeFor[Table](), rnd)
		if !ok {
			t.Fatal("quick cannot generate a Table")
		}
		tbl := v.Interface().(Table)
		if i%2 == 1 {
			spell(reflect.ValueOf(&tbl).Elem(), rnd)
		}
		check(&tbl)
	}
}

func TestHostnameSize(t *testing.T) {
	rnd := rand.New(rand.NewSource(2))
	for range 200 {
		v, _ := quick.Value(reflect.TypeFor[TableRow](), rnd)
		r := v.Interface().(TableRow)
		spell(reflect.ValueOf(&r).Elem(), rnd)
		const hosts = "*.é<x>\xff.example.com"
		h := hosts[:rnd.Intn(len(hosts)+1)]
		r.Hostnames = nil
		base := RowSize(r)
		if h != "" {
			r.Hostnames = []string{h}
		}
		body, _ := json.Marshal(r)
		if got := base + HostnameSize(h); got != len(body) {
			t.Fatalf("hostname %q: %d, json.Marshal %d bytes: %s", h, got, len(body), body)
		}
	}
}

// A table over MaxTableBytes is refused before it is encoded: refusing it
// allocates a small fraction of its size, where encoding it would
// allocate all of it, on every reconcile of the binding controller.
func TestPutTableRefusesBeforeEncoding(t *testing.T) {
	c := New(nil, nil)
	row := TableRow{Route: "HTTPRoute/ns/r", Path: &StringMatch{Type: "PathPrefix", Value: "/" + strings.Repeat("x", 1000)}}
	big := &Table{Gateway: "a/gw", Default: -1}
	for len(big.Rows)*1000 < MaxTableBytes+MaxTableBytes/8 {
		big.Rows = append(big.Rows, row)
	}
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	_, err := c.PutTable("a", "gw", big)
	runtime.ReadMemStats(&after)
	if !errors.Is(err, ErrTableTooLarge) {
		t.Fatalf("PutTable of %d bytes: %v", big.EncodedSize(), err)
	}
	if alloc := after.TotalAlloc - before.TotalAlloc; alloc > MaxTableBytes/16 {
		t.Fatalf("refusing a table over the bound allocated %d bytes", alloc)
	}
}
