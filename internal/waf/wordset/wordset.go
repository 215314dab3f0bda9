// Package wordset answers one question fast: does a string contain any of a
// set of words, with ASCII letters compared case-insensitively. The WAF asks
// it for every rule and argument: the @rx literal prefilter (internal/waf/rx)
// and @pm (internal/waf/pm), where on benign traffic the answer is almost
// always no and the whole subject is read.
//
// It is an Aho-Corasick automaton that stops at the first match, the
// semantics of github.com/petar-dambovaliev/aho-corasick with
// AsciiCaseInsensitive (which Coraza's @pm uses) and nothing more: no match
// positions, no match kinds. That library's search loop costs about 3 ns per
// byte even as a DFA; this one is a table lookup per byte.
//
// Memory is bounded whatever the words: the states nearest the root, where a
// scan of text that contains no word spends nearly all its time, get a full
// row of transitions (DenseBytes in all); deeper states keep only their trie
// edges and a failure link, so a state costs about 12 bytes plus its edges,
// not a row per byte class.
package wordset

import (
	"slices"
	"strings"
)

// DenseBytes bounds the full transition rows of one Set.
const DenseBytes = 32 << 10

// matchBit marks a transition into a state at which some word ends.
const matchBit = 1 << 31

// A Set is immutable once built and safe for concurrent use.
type Set struct {
	// class maps a byte (ASCII letters folded) to its column; 0 for a byte
	// that is in no word, which sends every state back to the root.
	class  [256]uint8
	nclass uint32
	// dense holds the rows of the states nearest the root: the next state
	// of state st on class c is dense[st+c].
	dense    []uint32
	denseLen uint32
	// State denseLen+i is sparse: its trie edges are
	// edges[first[i]:first[i+1]], its failure link fail[i] (always to a
	// shallower, non-matching state).
	first []uint32
	edges []edge
	fail  []uint32
	// start holds the bytes on which the root moves; starts lists them
	// when there are one or two.
	start  [256]bool
	starts []byte
	// always: a word is empty, so every string contains one.
	always bool
	// none: there are no words.
	none bool
}

type edge struct {
	class uint8
	to    uint32 // with matchBit
}

func fold(b byte) byte {
	if 'A' <= b && b <= 'Z' {
		return b + 'a' - 'A'
	}
	return b
}

// node is a trie state while building.
type node struct {
	next []edge // sorted by class, targets without matchBit
	fail uint32
	out  bool
}

// New builds the automaton for words. Duplicates are fine; an empty word
// makes every string match (internal/waf/pm does not ask: on such a list
// the library's answer depends on the order of the words).
func New(words []string) *Set {
	return build(words, DenseBytes)
}

// build is New with a bound on the dense rows, which tests set small to
// reach the sparse states with short word lists.
func build(words []string, denseBytes int) *Set {
	s := &Set{}
	if len(words) == 0 {
		s.none = true
		return s
	}
	for _, w := range words {
		if w == "" {
			s.always = true
			return s
		}
		for i := range len(w) {
			b := fold(w[i])
			if s.class[b] == 0 {
				s.nclass++
				s.class[b] = uint8(s.nclass) // at most 255 distinct bytes: fits
			}
		}
	}
	s.nclass++ // column 0
	for b := 'A'; b <= 'Z'; b++ {
		s.class[b] = s.class[b+'a'-'A']
	}
	nodes := trie(words, &s.class)
	order := bfs(nodes)
	s.layout(nodes, order, denseBytes)
	return s
}

// trie builds the trie of words over byte classes, with failure links and
// outputs.
func trie(words []string, class *[256]uint8) []node {
	// A word adds at most one state per byte: sized once, the slice is
	// never copied while it grows (a 1 MiB data file has a million states).
	n := 1
	for _, w := range words {
		n += len(w)
	}
	nodes := make([]node, 1, n)
	for _, w := range words {
		cur := uint32(0)
		for i := range len(w) {
			c := class[w[i]]
			n := &nodes[cur]
			j, found := slices.BinarySearchFunc(n.next, c, func(e edge, c uint8) int { return int(e.class) - int(c) })
			if found {
				cur = n.next[j].to
				continue
			}
			id := uint32(len(nodes))
			n.next = slices.Insert(n.next, j, edge{class: c, to: id})
			nodes = append(nodes, node{})
			cur = id
		}
		nodes[cur].out = true
	}
	return nodes
}

// bfs sets failure links and outputs and returns the states in breadth-first
// order, so that a state's failure target comes before it.
func bfs(nodes []node) []uint32 {
	order := make([]uint32, 0, len(nodes))
	order = append(order, 0)
	for i := 0; i < len(order); i++ {
		s := order[i]
		for _, e := range nodes[s].next {
			t := e.to
			if s != 0 {
				f := nodes[s].fail
				for {
					if to, ok := child(nodes, f, e.class); ok {
						nodes[t].fail = to
						break
					}
					if f == 0 {
						break
					}
					f = nodes[f].fail
				}
			}
			nodes[t].out = nodes[t].out || nodes[nodes[t].fail].out
			order = append(order, t)
		}
	}
	return order
}

func child(nodes []node, s uint32, c uint8) (uint32, bool) {
	for _, e := range nodes[s].next {
		if e.class == c {
			return e.to, true
		}
	}
	return 0, false
}

// layout renumbers the states in breadth-first order and lays out the dense
// rows and the sparse edges. A dense state's number is its row's offset in
// dense (premultiplied: one addition per byte, no multiplication); a
// sparse state's is len(dense) plus its index.
func (s *Set) layout(nodes []node, order []uint32, denseBytes int) {
	rowBytes := int(s.nclass) * 4
	ndense := uint32(max(1, min(len(order), denseBytes/rowBytes)))
	s.denseLen = ndense * s.nclass
	id := make([]uint32, len(nodes))
	for i, n := range order {
		if uint32(i) < ndense {
			id[n] = uint32(i) * s.nclass
		} else {
			id[n] = s.denseLen + uint32(i) - ndense
		}
	}
	flag := func(n uint32) uint32 {
		if nodes[n].out {
			return id[n] | matchBit
		}
		return id[n]
	}
	s.dense = make([]uint32, s.denseLen)
	for i, n := range order[:ndense] {
		row := s.dense[uint32(i)*s.nclass : uint32(i+1)*s.nclass]
		if i > 0 {
			// Failure targets are shallower, so their rows are done.
			f := id[nodes[n].fail]
			copy(row, s.dense[f:f+s.nclass])
		}
		for _, e := range nodes[n].next {
			row[e.class] = flag(e.to)
		}
	}
	for b := range 256 {
		if s.start[b] = s.dense[s.class[b]] != 0; s.start[b] && len(s.starts) <= 2 {
			s.starts = append(s.starts, byte(b))
		}
	}
	if len(s.starts) > 2 {
		s.starts = nil
	}
	sparse := order[ndense:]
	s.first = make([]uint32, 0, len(sparse)+1)
	s.fail = make([]uint32, 0, len(sparse))
	for _, n := range sparse {
		s.first = append(s.first, uint32(len(s.edges)))
		s.fail = append(s.fail, id[nodes[n].fail])
		for _, e := range nodes[n].next {
			s.edges = append(s.edges, edge{class: e.class, to: flag(e.to)})
		}
	}
	s.first = append(s.first, uint32(len(s.edges)))
}

// Contains reports whether str contains one of the words.
func (s *Set) Contains(str string) bool {
	if s.always || s.none {
		return s.always
	}
	st := uint32(0)
	dense, denseLen := s.dense, s.denseLen
	for i := 0; i < len(str); i++ {
		if st == 0 {
			// At the root most bytes start no word: skip them without
			// the table walk's dependent loads.
			j := s.nextStart(str[i:])
			if j < 0 {
				return false
			}
			i += j
		}
		c := uint32(s.class[str[i]])
		if st < denseLen {
			st = dense[st+c]
		} else {
			st = s.sparseStep(st, c)
		}
		if st&matchBit != 0 {
			return true
		}
	}
	return false
}

// nextStart returns the index of the first byte of str that starts a word,
// or -1. With one or two such bytes (one word, or words that all start
// with the same letter in either case) it is strings.IndexByte, which the
// runtime vectorises.
func (s *Set) nextStart(str string) int {
	switch len(s.starts) {
	case 1:
		return strings.IndexByte(str, s.starts[0])
	case 2:
		a := strings.IndexByte(str, s.starts[0])
		if a >= 0 {
			str = str[:a]
		}
		if b := strings.IndexByte(str, s.starts[1]); b >= 0 {
			return b
		}
		return a
	}
	for i := range len(str) {
		if s.start[str[i]] {
			return i
		}
	}
	return -1
}

// sparseStep follows the trie edges and failure links of a deep state until
// an edge takes class c or the walk reaches a dense row.
func (s *Set) sparseStep(st, c uint32) uint32 {
	if c == 0 {
		return 0
	}
	for st >= s.denseLen {
		i := st - s.denseLen
		for _, e := range s.edges[s.first[i]:s.first[i+1]] {
			if uint32(e.class) == c {
				return e.to
			}
		}
		st = s.fail[i]
	}
	return s.dense[st+c]
}

// Bytes is the memory the automaton holds, for tests and bounds: its
// tables and the byte-indexed class and start arrays.
func (s *Set) Bytes() int {
	return 4*(len(s.dense)+len(s.first)+len(s.fail)) + 8*len(s.edges) + len(s.class) + len(s.start) + len(s.starts)
}
