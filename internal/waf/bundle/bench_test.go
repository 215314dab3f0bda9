package bundle_test

import (
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"strings"
	"testing"

	"github.com/vilaca/portal/internal/waf/bundle"
	"github.com/vilaca/portal/internal/waf/bundle/s3test"
	"github.com/vilaca/portal/internal/waf/ruleset"
)

// tenMB is a bundle document of about 10 MB: eight rules and the word
// lists they read (base64 in the document).
func tenMB(b *testing.B) []byte {
	rules := "SecRuleEngine On\n"
	files := map[string][]byte{}
	buf := make([]byte, 16)
	// Eight word lists under the 1 MiB a file operator may read.
	for i := range 8 {
		var words strings.Builder
		for words.Len() < 935_000 {
			_, _ = rand.Read(buf)
			words.WriteString(hex.EncodeToString(buf))
			words.WriteByte('\n')
		}
		name := fmt.Sprintf("words-%d.txt", i)
		files[name] = []byte(words.String())
		rules += fmt.Sprintf("SecRule ARGS \"@pmFromFile %s\" \"id:%d,phase:2,deny,status:403\"\n", name, 7001+i)
	}
	data, err := bundle.Encode(ruleset.Bundle{Rules: rules, DataFiles: files})
	if err != nil {
		b.Fatal(err)
	}
	return data
}

// BenchmarkFetch10MB fetches and verifies a 10 MB bundle from the real
// versitygw, over plain HTTP and over mutual TLS through nginx: download,
// size cap, sha256, decode and sandbox check. Each iteration is a new
// Fetcher, so nothing is served from memory.
func BenchmarkFetch10MB(b *testing.B) {
	s := s3test.Start(b)
	s.CreateBucket(b, bucket)
	data := tenMB(b)
	s.Put(b, bucket, "big.json", data)
	want := sum(data)
	serverCA, clientCA := s3test.NewCA(b, "storage-ca"), s3test.NewCA(b, "client-ca")
	crt, key := serverCA.Server(b)
	front := s3test.StartNginx(b, s.Addr(), s3test.TLS{Cert: crt, Key: key, ClientCA: clientCA.PEM})
	pool := bundle.Config{}
	cc, ck := clientCA.Client(b, "portal")
	mtls := mtlsConfig(b, serverCA.PEM, cc, ck)
	for _, tc := range []struct {
		name, url string
		cfg       bundle.Config
	}{
		{"http", s.URL(), pool},
		{"mtls-nginx", front.URL(), mtls},
	} {
		tc.cfg.AccessKeyID, tc.cfg.SecretAccessKey = s3test.AccessKey, s3test.SecretKey
		b.Run(tc.name, func(b *testing.B) {
			b.SetBytes(int64(len(data)))
			for b.Loop() {
				f, _ := fetcher(b, bundle.Options{URL: tc.url, Source: bundle.StaticConfig(tc.cfg)})
				if _, err := f.Get(b.Context(), "ns/p", "s3://"+bucket+"/big.json", want); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
