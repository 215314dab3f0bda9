package cache

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"
	"time"
)

// ErrNotFound is returned by the client when the cache has no such rule set.
var ErrNotFound = errors.New("rule set not found in the cache")

// ErrDigestMismatch is returned by EntryWithDigest when the body does not
// have the sha256 the latest revision announced.
var ErrDigestMismatch = errors.New("rule set entry does not match the sha256 announced by /latest")

// DefaultMaxResponseBytes bounds the body the client reads for one entry.
const DefaultMaxResponseBytes = 256 << 20

// Client reads a rule set cache server: what the waf-proxy data plane polls.
type Client struct {
	base *url.URL
	http *http.Client
	// MaxResponseBytes bounds a response body (DefaultMaxResponseBytes when 0).
	MaxResponseBytes int64
	// Token, when set, returns the bearer token sent with each request; it
	// is called per request, so a rotated token file is picked up.
	Token func() (string, error)
}

// NewClient returns a client for the server at baseURL ("https://portal:18080").
// hc nil means a client with a 30 s timeout.
func NewClient(baseURL string, hc *http.Client) (*Client, error) {
	u, err := url.Parse(baseURL)
	if err != nil {
		return nil, fmt.Errorf("cache url %q: %w", baseURL, err)
	}
	if u.Scheme != "http" && u.Scheme != "https" || u.Host == "" {
		return nil, fmt.Errorf("cache url %q: want http(s)://host[:port]", baseURL)
	}
	if hc == nil {
		hc = &http.Client{Timeout: 30 * time.Second}
	}
	return &Client{base: u, http: hc}, nil
}

// Latest returns the id and timestamp of the latest revision of a rule set.
func (c *Client) Latest(ctx context.Context, namespace, name string) (Latest, error) {
	var l Latest
	_, err := c.get(ctx, "/rules/"+namespace+"/"+name+"/latest", &l)
	return l, err
}

// Entry returns the latest revision of a rule set, rules and data files.
func (c *Client) Entry(ctx context.Context, namespace, name string) (Entry, error) {
	var e Entry
	_, err := c.get(ctx, "/rules/"+namespace+"/"+name, &e)
	return e, err
}

// EntryWithDigest is Entry that first checks the body against sha256 (hex),
// the digest Latest announced: ErrDigestMismatch when it differs, and
// nothing is decoded.
func (c *Client) EntryWithDigest(ctx context.Context, namespace, name, sha256Hex string) (Entry, error) {
	var e Entry
	path := "/rules/" + namespace + "/" + name
	_, err := c.get(ctx, path, func(body []byte) error {
		sum := sha256.Sum256(body)
		if got := hex.EncodeToString(sum[:]); sha256Hex == "" || !strings.EqualFold(got, sha256Hex) {
			return fmt.Errorf("rule set cache: GET %s: %w: got %s, want %q", path, ErrDigestMismatch, got, sha256Hex)
		}
		return json.Unmarshal(body, &e)
	})
	return e, err
}

// TableLatest returns the id and digest of a Gateway's route table.
func (c *Client) TableLatest(ctx context.Context, namespace, gateway string) (TableLatest, error) {
	var l TableLatest
	_, err := c.get(ctx, "/tables/"+namespace+"/"+gateway+"/latest", &l)
	return l, err
}

// TableWithDigest returns a Gateway's route table after checking the body
// against sha256 (hex), as EntryWithDigest does.
func (c *Client) TableWithDigest(ctx context.Context, namespace, gateway, sha256Hex string) (*Table, error) {
	var t Table
	path := "/tables/" + namespace + "/" + gateway
	_, err := c.get(ctx, path, func(body []byte) error {
		sum := sha256.Sum256(body)
		if got := hex.EncodeToString(sum[:]); sha256Hex == "" || !strings.EqualFold(got, sha256Hex) {
			return fmt.Errorf("rule set cache: GET %s: %w: got %s, want %q", path, ErrDigestMismatch, got, sha256Hex)
		}
		return json.Unmarshal(body, &t)
	})
	if err != nil {
		return nil, err
	}
	return &t, nil
}

// get reads path into into: a pointer to decode JSON into, or a
// func([]byte) error that takes the body as it came.
func (c *Client) get(ctx context.Context, path string, into any) ([]byte, error) {
	parse := ParsePath
	if strings.HasPrefix(path, "/tables/") {
		parse = ParseTablePath
	}
	if _, _, _, err := parse(path); err != nil {
		return nil, fmt.Errorf("rule set cache: %w", err)
	}
	u := *c.base
	u.Path = strings.TrimSuffix(u.Path, "/") + path
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u.String(), nil)
	if err != nil {
		return nil, err
	}
	if c.Token != nil {
		token, err := c.Token()
		if err != nil {
			return nil, fmt.Errorf("rule set cache: bearer token: %w", err)
		}
		req.Header.Set("Authorization", "Bearer "+token)
	}
	resp, err := c.http.Do(req)
	if err != nil {
		return nil, fmt.Errorf("rule set cache: %w", err)
	}
	defer resp.Body.Close()
	limit := c.MaxResponseBytes
	if limit <= 0 {
		limit = DefaultMaxResponseBytes
	}
	body := io.LimitReader(resp.Body, limit+1)
	switch resp.StatusCode {
	case http.StatusOK:
	case http.StatusNotFound:
		_, _ = io.Copy(io.Discard, body)
		return nil, fmt.Errorf("GET %s: %w", path, ErrNotFound)
	default:
		msg, _ := io.ReadAll(io.LimitReader(body, 512))
		return nil, fmt.Errorf("rule set cache: GET %s: %s: %s", path, resp.Status, strings.TrimSpace(string(msg)))
	}
	data, err := io.ReadAll(body)
	if err != nil {
		return nil, fmt.Errorf("rule set cache: GET %s: %w", path, err)
	}
	if int64(len(data)) > limit {
		return nil, fmt.Errorf("rule set cache: GET %s: response larger than %d bytes", path, limit)
	}
	if f, ok := into.(func([]byte) error); ok {
		return data, f(data)
	}
	if err := json.Unmarshal(data, into); err != nil {
		return nil, fmt.Errorf("rule set cache: GET %s: decode: %w", path, err)
	}
	return data, nil
}
