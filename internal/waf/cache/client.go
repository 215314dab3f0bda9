package cache

import (
	"context"
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

// DefaultMaxResponseBytes bounds the body the client reads for one entry.
const DefaultMaxResponseBytes = 256 << 20

// Client reads a rule set cache server: what the waf-proxy data plane polls.
type Client struct {
	base *url.URL
	http *http.Client
	// MaxResponseBytes bounds a response body (DefaultMaxResponseBytes when 0).
	MaxResponseBytes int64
}

// NewClient returns a client for the server at baseURL ("http://portal:18080").
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
	err := c.get(ctx, "/rules/"+namespace+"/"+name+"/latest", &l)
	return l, err
}

// Entry returns the latest revision of a rule set, rules and data files.
func (c *Client) Entry(ctx context.Context, namespace, name string) (Entry, error) {
	var e Entry
	err := c.get(ctx, "/rules/"+namespace+"/"+name, &e)
	return e, err
}

func (c *Client) get(ctx context.Context, path string, into any) error {
	if _, _, _, err := ParsePath(path); err != nil {
		return fmt.Errorf("rule set cache: %w", err)
	}
	u := *c.base
	u.Path = strings.TrimSuffix(u.Path, "/") + path
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u.String(), nil)
	if err != nil {
		return err
	}
	resp, err := c.http.Do(req)
	if err != nil {
		return fmt.Errorf("rule set cache: %w", err)
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
		return fmt.Errorf("GET %s: %w", path, ErrNotFound)
	default:
		msg, _ := io.ReadAll(io.LimitReader(body, 512))
		return fmt.Errorf("rule set cache: GET %s: %s: %s", path, resp.Status, strings.TrimSpace(string(msg)))
	}
	data, err := io.ReadAll(body)
	if err != nil {
		return fmt.Errorf("rule set cache: GET %s: %w", path, err)
	}
	if int64(len(data)) > limit {
		return fmt.Errorf("rule set cache: GET %s: response larger than %d bytes", path, limit)
	}
	if err := json.Unmarshal(data, into); err != nil {
		return fmt.Errorf("rule set cache: GET %s: decode: %w", path, err)
	}
	return nil
}
