package clustercache

import (
	"bytes"
	"compress/flate"
	"encoding/json"
	"math"
	"slices"
	"sync"
)

// Sampling bounds of a resource's dictionary.
const (
	// dictionarySamples is how many objects, from as many namespaces (or,
	// for cluster-scoped ones, names), the dictionary is chosen among.
	dictionarySamples = 8
	// dictionaryAfter is how many objects are cached before the choice is
	// made with the samples there are, for resources in few namespaces.
	dictionaryAfter = 256
)

// chooser picks the dictionary a resource's objects are deflated against.
// The dictionary used to be the first object the informer cached, so
// whoever created that object chose it for everyone: a tenant's odd first
// object made every cached object of its kind about three times larger. The
// chooser instead samples objects from distinct namespaces and keeps the one
// that deflates the others best, so one namespace has one vote. Objects
// cached before the choice are deflated without a dictionary; later ones
// against the chosen one (each Object keeps the dictionary it was deflated
// with).
type chooser struct {
	mu      sync.Mutex
	none    *dictionary
	chosen  *dictionary
	seen    int
	samples [][]byte
	keys    map[string]bool
}

func newChooser() *chooser {
	return &chooser{none: newDictionary(nil), keys: map[string]bool{}}
}

// newDictionary is a dictionary of data, fixed from the start.
func newDictionary(data []byte) *dictionary {
	d := new(dictionary)
	d.once.Do(func() { d.data = data })
	return d
}

// dictionary returns the dictionary to deflate the next object with, and
// whether the chooser wants that object as a sample (offer it after
// compacting it).
func (c *chooser) dictionary(key string) (d *dictionary, sample bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.chosen != nil {
		return c.chosen, false
	}
	c.seen++
	return c.none, !c.keys[key]
}

// offer adds an object's JSON as a sample, and chooses once there are
// enough samples or enough objects have been seen.
func (c *chooser) offer(key string, obj map[string]any) {
	data, err := json.Marshal(obj)
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.chosen != nil {
		return
	}
	if err == nil && !c.keys[key] && len(c.samples) < dictionarySamples {
		c.keys[key] = true
		c.samples = append(c.samples, data[:min(len(data), maxDictionary)])
	}
	if len(c.samples) >= dictionarySamples || c.seen >= dictionaryAfter {
		c.chosen = newDictionary(bestDictionary(c.samples))
		c.samples, c.keys = nil, nil
	}
}

// choose is offer's decision for a resource whose samples never reach
// dictionarySamples: called when the chooser has seen dictionaryAfter
// objects without a sample to offer.
func (c *chooser) choose() {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.chosen == nil && c.seen >= dictionaryAfter {
		c.chosen = newDictionary(bestDictionary(c.samples))
		c.samples, c.keys = nil, nil
	}
}

// bestDictionary is the sample against which the others deflate best, by
// the median of their compression ratios: each sample has one vote, so an
// odd one (large, random) neither wins by compressing badly against every
// other candidate nor sinks the candidates that serve the rest well.
func bestDictionary(samples [][]byte) []byte {
	if len(samples) < 2 {
		if len(samples) == 1 {
			return samples[0]
		}
		return nil
	}
	var (
		best      []byte
		bestScore = math.Inf(1)
		out       bytes.Buffer
		ratios    = make([]float64, 0, len(samples)-1)
	)
	for i, dict := range samples {
		ratios = ratios[:0]
		for j, s := range samples {
			if i == j || len(s) == 0 {
				continue
			}
			out.Reset()
			w, err := flate.NewWriterDict(&out, deflateLevel, dict)
			if err != nil {
				return nil
			}
			_, _ = w.Write(s)
			_ = w.Close()
			ratios = append(ratios, float64(out.Len())/float64(len(s)))
		}
		if len(ratios) == 0 {
			continue
		}
		slices.Sort(ratios)
		if score := ratios[len(ratios)/2]; score < bestScore {
			best, bestScore = dict, score
		}
	}
	return best
}
