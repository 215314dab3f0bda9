package admission

// withoutManagedFields returns raw, a JSON object as the API server sends it
// in an AdmissionReview, without metadata.managedFields. Rules never see
// managedFields (audit drops them too), yet they are often half of an
// object's bytes and most of the maps decoding it would build: cutting them
// out of the bytes before decoding makes the decision cheaper.
//
// It only scans: when raw is not shaped as expected (no metadata object, a
// key written with escapes, invalid JSON) it returns raw unchanged, and the
// decoder has the last word on validity.
func withoutManagedFields(raw []byte) []byte {
	start, end, ok := managedFieldsSpan(raw)
	if !ok {
		return raw
	}
	out := make([]byte, 0, len(raw)-(end-start))
	return append(append(out, raw[:start]...), raw[end:]...)
}

// managedFieldsSpan finds `"managedFields": value` in the top-level
// "metadata" object of raw, with the comma that separates it from a
// neighbour, so that cutting [start, end) leaves valid JSON.
func managedFieldsSpan(raw []byte) (start, end int, ok bool) {
	s := scanner{b: raw}
	md, n := s.memberKey(0, "metadata")
	if n == 0 {
		return 0, 0, false
	}
	mdValue, ok := s.afterColon(md)
	if !ok {
		return 0, 0, false
	}
	// A duplicated managedFields would leave the other one in place.
	key, n := s.memberKey(mdValue, "managedFields")
	if n != 1 {
		return 0, 0, false
	}
	valStart, ok := s.afterColon(key)
	if !ok {
		return 0, 0, false
	}
	valEnd, ok := s.skipValue(valStart)
	if !ok {
		return 0, 0, false
	}
	// Take the following comma, or else the preceding one.
	if next := s.ws(valEnd); next < len(raw) && raw[next] == ',' {
		return key, s.ws(next + 1), true
	}
	prev := key - 1
	for prev >= 0 && isSpace(raw[prev]) {
		prev--
	}
	if prev >= 0 && raw[prev] == ',' {
		return prev, valEnd, true
	}
	return key, valEnd, true
}

// scanner walks JSON bytes without decoding them. Positions are byte
// offsets; ok false means the bytes are not what a valid object would have.
type scanner struct{ b []byte }

func isSpace(c byte) bool { return c == ' ' || c == '\t' || c == '\n' || c == '\r' }

func (s *scanner) ws(i int) int {
	for i < len(s.b) && isSpace(s.b[i]) {
		i++
	}
	return i
}

// memberKey returns where key's quoted name starts in the object at i, its
// last occurrence (the one a decoder keeps), and how many times it occurs;
// 0 also when the bytes are not a well-formed object. Keys written with
// escapes never match: the caller then leaves the bytes alone.
func (s *scanner) memberKey(i int, key string) (at, n int) {
	i = s.ws(i)
	if i >= len(s.b) || s.b[i] != '{' {
		return 0, 0
	}
	i = s.ws(i + 1)
	if i < len(s.b) && s.b[i] == '}' {
		return 0, 0
	}
	for i < len(s.b) {
		if s.b[i] != '"' {
			return 0, 0
		}
		keyStart := i
		keyEnd, ok := s.skipString(i)
		if !ok {
			return 0, 0
		}
		if string(s.b[keyStart+1:keyEnd-1]) == key {
			at, n = keyStart, n+1
		}
		v, ok := s.afterColon(keyStart)
		if !ok {
			return 0, 0
		}
		if i, ok = s.skipValue(v); !ok {
			return 0, 0
		}
		i = s.ws(i)
		switch {
		case i < len(s.b) && s.b[i] == '}':
			return at, n
		case i < len(s.b) && s.b[i] == ',':
			i = s.ws(i + 1)
		default:
			return 0, 0
		}
	}
	return 0, 0
}

// afterColon returns where the value starts after the key at i.
func (s *scanner) afterColon(i int) (int, bool) {
	end, ok := s.skipString(i)
	if !ok {
		return 0, false
	}
	end = s.ws(end)
	if end >= len(s.b) || s.b[end] != ':' {
		return 0, false
	}
	return s.ws(end + 1), true
}

// skipString returns the position after the string starting at i.
func (s *scanner) skipString(i int) (int, bool) {
	if i >= len(s.b) || s.b[i] != '"' {
		return 0, false
	}
	for i++; i < len(s.b); i++ {
		switch s.b[i] {
		case '\\':
			i++
		case '"':
			return i + 1, true
		}
	}
	return 0, false
}

// skipValue returns the position after the value starting at i.
func (s *scanner) skipValue(i int) (int, bool) {
	i = s.ws(i)
	if i >= len(s.b) {
		return 0, false
	}
	switch s.b[i] {
	case '"':
		return s.skipString(i)
	case '{', '[':
		depth := 0
		for ; i < len(s.b); i++ {
			switch s.b[i] {
			case '"':
				end, ok := s.skipString(i)
				if !ok {
					return 0, false
				}
				i = end - 1
			case '{', '[':
				depth++
			case '}', ']':
				if depth--; depth == 0 {
					return i + 1, true
				}
			}
		}
		return 0, false
	default:
		// A number, true, false or null: up to the next delimiter.
		j := i
		for j < len(s.b) && !isSpace(s.b[j]) && s.b[j] != ',' && s.b[j] != '}' && s.b[j] != ']' {
			j++
		}
		return j, j > i
	}
}
