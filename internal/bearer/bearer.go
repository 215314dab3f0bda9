// Package bearer reads "Authorization: Bearer <token>" headers for the
// servers that take ServiceAccount tokens from clients nobody has
// authenticated yet: the WAF rule set cache and /metrics.
package bearer

import "strings"

// Token returns the token of an Authorization header's value: the scheme
// matched without regard to case, the token without surrounding space. It
// refuses an empty token and one longer than max bytes, which the caller
// would otherwise hash and send to the API server in a review.
func Token(header string, max int) (string, bool) {
	scheme, token, ok := strings.Cut(header, " ")
	token = strings.TrimSpace(token)
	if !ok || !strings.EqualFold(scheme, "Bearer") || token == "" || len(token) > max {
		return "", false
	}
	return token, true
}
