package proxy

import (
	"bytes"
	"io"
	"sync"

	"github.com/corazawaf/coraza/v3/types"
)

// bodyBufferSize is the size of the buffers bodies are copied through, the
// same as io.Copy's.
const bodyBufferSize = 32 << 10

// buffers hands out the proxy's copy buffers, for bodies into the WAF and
// for the ReverseProxy's response copy (it is an httputil.BufferPool).
// Without it every request allocated up to three 32 KiB buffers, a third
// of what a benign GET allocates: Coraza's ReadRequestBodyFrom and
// ReadResponseBodyFrom copy with io.CopyN into a body buffer that has no
// ReadFrom, and the ReverseProxy allocates one per response.
type buffers struct{ pool sync.Pool }

func (b *buffers) Get() []byte {
	if p, ok := b.pool.Get().(*[]byte); ok {
		return *p
	}
	return make([]byte, bodyBufferSize)
}

func (b *buffers) Put(buf []byte) {
	if cap(buf) < bodyBufferSize {
		return
	}
	buf = buf[:bodyBufferSize]
	b.pool.Put(&buf)
}

// bodyWriter is Transaction.WriteRequestBody or WriteResponseBody: it takes
// what the body limit allows and reports how much that was.
type bodyWriter func([]byte) (*types.Interruption, int, error)

// feed copies body into the transaction with write, which applies the rule
// set's body limit and action as ReadRequestBodyFrom would. It returns the
// interruption if the WAF raised one (a Reject over the limit, or a rule of
// the phase the limit made Coraza run), or, when the limit cut the body
// short (ProcessPartial), a reader of the rest, which goes on uninspected.
// rest is nil when the transaction holds the whole body. When max is
// positive, feed writes no more than max bytes whatever the transaction
// would take (a ctl:responseBodyLimit can raise a transaction's limit) and
// the rest goes on uninspected, as with ProcessPartial.
func (b *buffers) feed(write bodyWriter, body io.Reader, max int64) (it *types.Interruption, rest io.Reader, err error) {
	buf := b.Get()
	defer b.Put(buf)
	var fed int64
	for {
		n, rerr := body.Read(buf)
		if n > 0 {
			m := n
			if max > 0 && fed+int64(m) > max {
				m = int(max - fed)
			}
			it, took, err := write(buf[:m])
			if err != nil || it != nil {
				return it, nil, err
			}
			fed += int64(took)
			if took < n {
				return nil, io.MultiReader(bytes.NewReader(bytes.Clone(buf[took:n])), body), nil
			}
		}
		switch {
		case rerr == io.EOF:
			return nil, nil, nil
		case rerr != nil:
			return nil, nil, rerr
		}
	}
}
