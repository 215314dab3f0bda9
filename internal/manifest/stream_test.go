package manifest

import (
	"errors"
	"io"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
)

// streamSeeds are inputs where reading a stream a buffer at a time could
// cut a document differently from Split: separators with and without
// comments, look-alikes, CRLF, no final newline, leading comments, empty
// documents and a line longer than the read buffer.
var streamSeeds = []string{
	"",
	"a: 1",
	"a: 1\n",
	"---\na: 1\n---\nb: 2\n",
	"# leading\n\n---\na: 1\n--- # trailing comment\nb: 2\n---x: 3\n",
	"a: 1\r\n---\r\nb: 2\r\n",
	"---\n---\n\n# only a comment\n---\nc: 3",
	"a: " + strings.Repeat("x", 3*streamBuffer+17) + "\n---\nb: 2\n",
	"{\"apiVersion\": \"v1\", \"kind\": \"List\", \"items\": []}",
}

func streamed(t testing.TB, data string) []Document {
	t.Helper()
	var docs []Document
	if _, err := splitStream("f.yaml", strings.NewReader(data), func(d Document) bool {
		docs = append(docs, d)
		return true
	}); err != nil {
		t.Fatal(err)
	}
	return docs
}

// TestStreamSplitsAsSplit: the streaming reader cuts every input into the
// documents, lines and bytes Split does.
func TestStreamSplitsAsSplit(t *testing.T) {
	for _, in := range streamSeeds {
		if got, want := streamed(t, in), Split("f.yaml", []byte(in)); !reflect.DeepEqual(got, want) {
			t.Fatalf("%.80q: streamed %d documents, Split %d\n got %.200v\nwant %.200v", in, len(got), len(want), got, want)
		}
	}
}

func FuzzStreamSplitsAsSplit(f *testing.F) {
	for _, s := range streamSeeds {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, in string) {
		if got, want := streamed(t, in), Split("f.yaml", []byte(in)); !reflect.DeepEqual(got, want) {
			t.Fatalf("%q: streamed %v, Split %v", in, got, want)
		}
	})
}

// TestStreamStopsWhenAsked: a consumer that stops gets no more documents.
func TestStreamStopsWhenAsked(t *testing.T) {
	dir := t.TempDir()
	for _, name := range []string{"a.yaml", "b.yaml"} {
		if err := os.WriteFile(filepath.Join(dir, name), []byte("a: 1\n---\nb: 2\n"), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	n := 0
	for _, err := range Stream([]string{dir}, nil) {
		if err != nil {
			t.Fatal(err)
		}
		n++
		if n == 3 {
			break
		}
	}
	if n != 3 {
		t.Fatalf("%d documents", n)
	}
}

// TestCappedReader: a stream of exactly the limit reads whole, one byte
// more fails (TestReadPathsStdinLimit covers MaxStdin itself).
func TestCappedReader(t *testing.T) {
	for _, c := range []struct {
		in      string
		wantErr bool
	}{{"0123456789", false}, {"0123456789a", true}, {"", false}} {
		got, err := io.ReadAll(&cappedReader{r: strings.NewReader(c.in), left: 10})
		if (err != nil) != c.wantErr || (err != nil && !errors.Is(err, errTooLarge)) || (err == nil && string(got) != c.in) {
			t.Fatalf("%q: read %q, error %v", c.in, got, err)
		}
	}
}
