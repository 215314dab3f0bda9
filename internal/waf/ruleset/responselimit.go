package ruleset

import (
	"io/fs"
	"strconv"
	"strings"
	"sync"

	"github.com/corazawaf/coraza/v3"
)

// corazaResponseBodyLimit is Coraza's SecResponseBodyLimit when no
// directive sets one (corazawaf.NewWAF).
const corazaResponseBodyLimit = 524288

// responseLimit is the SecResponseBodyLimit a compile ends with: the last
// directive setting it, in the order Coraza evaluates them (the bundle's
// own and those of the Core Rule Set files it includes).
type responseLimit struct {
	value int64
	set   bool
}

// effective is the limit Coraza applies: the last value written, or its
// default. A value Coraza refuses (not a number, <= 0, > 1 GiB) fails the
// compile anyway, so it is reported as written and nothing clamps it.
func (l responseLimit) effective() int64 {
	if l.set {
		return l.value
	}
	return corazaResponseBodyLimit
}

// note records a SecResponseBodyLimit directive's argument, parsed the way
// Coraza parses it (directiveSecResponseBodyLimit).
func (l *responseLimit) note(opts string) {
	v, err := strconv.ParseInt(opts, 10, 64)
	if err != nil {
		v = 0
	}
	l.value, l.set = v, true
}

// include records the SecResponseBodyLimit of the Core Rule Set files an
// Include of pattern reads, in Coraza's order (fs.Glob sorts; a plain path
// is one file).
func (l *responseLimit) include(crs fs.FS, pattern string) {
	paths := []string{pattern}
	if strings.Contains(pattern, "*") {
		paths, _ = fs.Glob(crs, pattern)
	}
	for _, p := range paths {
		if v, ok := crsResponseLimits(crs)[p]; ok {
			*l = v
		}
	}
}

var (
	crsLimitsOnce sync.Once
	crsLimits     map[string]responseLimit
)

// crsResponseLimits maps each embedded Core Rule Set file that sets
// SecResponseBodyLimit to the last value it sets (only
// @coraza.conf-recommended does, today). The files never change, so they are
// read once, not on every compile that includes them.
func crsResponseLimits(crs fs.FS) map[string]responseLimit {
	crsLimitsOnce.Do(func() {
		crsLimits = map[string]responseLimit{}
		_ = fs.WalkDir(crs, ".", func(p string, d fs.DirEntry, err error) error {
			if err != nil || d.IsDir() || !strings.HasSuffix(p, ".conf") && !strings.HasPrefix(d.Name(), "@") {
				return nil
			}
			data, err := fs.ReadFile(crs, p)
			if err != nil || !strings.Contains(strings.ToLower(string(data)), "secresponsebodylimit") {
				return nil
			}
			dirs, _ := split(string(data), 1)
			var l responseLimit
			for _, d := range dirs {
				if d.Name == "secresponsebodylimit" {
					l.note(d.Opts)
				}
			}
			if l.set {
				crsLimits[p] = l
			}
			return nil
		})
	})
	return crsLimits
}

// clampResponseBody returns opts whose configuration lowers the WAF's
// SecResponseBodyLimit to MaxResponseBodyBytes when the rules ask for more.
// Coraza sizes every transaction's response body buffer by the WAF's limit
// and refuses to write past it, even when ctl:responseBodyLimit raised the
// transaction's own limit, so the clamp bounds what any rule set can make a
// data plane hold for one response. It goes before opts.Configure, which may
// lower the limit further (the waf-proxy's --response-body-limit).
func (o Options) clampResponseBody(l responseLimit) Options {
	limit := o.MaxResponseBodyBytes
	if limit <= 0 || l.effective() <= limit {
		return o
	}
	next := o.Configure
	o.Configure = func(cfg coraza.WAFConfig) coraza.WAFConfig {
		cfg = cfg.WithResponseBodyLimit(int(min(limit, int64(^uint(0)>>1))))
		if next != nil {
			cfg = next(cfg)
		}
		return cfg
	}
	return o
}
