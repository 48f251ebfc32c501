package httplimit

import (
	"encoding/json"
	"net/http"
	"strconv"
)

// Problem types (RFC 9457 "type" members).
const (
	// ProblemQuotaExceeded is draft-ietf-httpapi-ratelimit-headers-11's quota-exceeded
	// problem type, used for 429 responses.
	ProblemQuotaExceeded = "https://iana.org/assignments/http-problem-types#quota-exceeded"
	// ProblemTemporaryReducedCapacity is draft-ietf-httpapi-ratelimit-headers'
	// temporary-reduced-capacity problem type, used for 503 responses to requests the
	// overload limit shed (Config.Overload).
	ProblemTemporaryReducedCapacity = "https://iana.org/assignments/http-problem-types#temporary-reduced-capacity"
	// ProblemBlank is RFC 9457's default type: the status code says it all.
	ProblemBlank = "about:blank"
)

// Problem is an RFC 9457 problem details object, served as application/problem+json.
type Problem struct {
	Type   string `json:"type,omitempty"`
	Title  string `json:"title,omitempty"`
	Status int    `json:"status,omitempty"`
	Detail string `json:"detail,omitempty"`
	// ViolatedPolicies is the quota-exceeded extension member: the names of the policies
	// whose quota was exceeded.
	ViolatedPolicies []string `json:"violated-policies,omitempty"`
}

// ServeHTTP writes p with status p.Status (500 if unset). Headers already set on w, such
// as Retry-After and the RateLimit fields, are kept.
func (p *Problem) ServeHTTP(w http.ResponseWriter, _ *http.Request) {
	status := p.Status
	if status == 0 {
		status = http.StatusInternalServerError
	}
	body, err := json.Marshal(p)
	if err != nil { // cannot happen: every field is a string, int or []string
		body = []byte(`{"status":` + strconv.Itoa(status) + `}`)
	}
	h := w.Header()
	h.Set("Content-Type", "application/problem+json")
	h.Set("Content-Length", strconv.Itoa(len(body)+1))
	h.Set("X-Content-Type-Options", "nosniff")
	w.WriteHeader(status)
	w.Write(append(body, '\n'))
}

// DefaultLimited is the default Config.Limited: a 429 quota-exceeded problem naming the
// violated policies. The Retry-After and RateLimit fields are already set.
func DefaultLimited(w http.ResponseWriter, r *http.Request, res *Result) {
	p := &Problem{
		Type:             ProblemQuotaExceeded,
		Title:            "Request cannot be satisfied as assigned quota has been exceeded",
		Status:           http.StatusTooManyRequests,
		Detail:           "Retry after " + seconds(w.Header().Get(HeaderRetryAfter)) + ".",
		ViolatedPolicies: res.Violated(),
	}
	p.ServeHTTP(w, r)
}

// DefaultUnavailable is the default Config.Unavailable: a 503 problem. Retry-After is
// already set. The error is not shown to the client.
func DefaultUnavailable(w http.ResponseWriter, r *http.Request, _ error) {
	blank(w, r, http.StatusServiceUnavailable,
		"The rate limiter is unavailable; retry after "+seconds(w.Header().Get(HeaderRetryAfter))+".")
}

// DefaultError is the default Config.Error: a 500 problem. The error is not shown to the
// client.
func DefaultError(w http.ResponseWriter, r *http.Request, _ error) {
	blank(w, r, http.StatusInternalServerError, "The rate limit for this request could not be decided.")
}

// blank writes a problem of type about:blank with status and detail.
func blank(w http.ResponseWriter, r *http.Request, status int, detail string) {
	p := &Problem{Type: ProblemBlank, Title: http.StatusText(status), Status: status, Detail: detail}
	p.ServeHTTP(w, r)
}

// seconds spells a delay-seconds value: "1 second", "30 seconds".
func seconds(v string) string {
	if v == "1" {
		return "1 second"
	}
	return v + " seconds"
}
