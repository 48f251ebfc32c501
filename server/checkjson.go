package server

import (
	"encoding/json"
	"net/http"
	"strconv"
	"sync"
)

// appendCheckResponse appends r as json.Marshal writes it, without reflection.
func appendCheckResponse(b []byte, r *CheckResponse) []byte {
	b = append(b, `{"allowed":`...)
	b = strconv.AppendBool(b, r.Allowed)
	if r.RetryAfterMs != 0 {
		b = appendIntField(b, `,"retry_after_ms":`, r.RetryAfterMs)
	}
	if r.Limits == nil {
		return append(b, `,"limits":null}`...)
	}
	b = append(b, `,"limits":[`...)
	for i := range r.Limits {
		if i > 0 {
			b = append(b, ',')
		}
		b = appendLimitStatus(b, &r.Limits[i])
	}
	return append(b, "]}"...)
}

// appendLimitStatus appends ls as json.Marshal writes it (fields in order, omitempty
// honoured).
func appendLimitStatus(b []byte, ls *LimitStatus) []byte {
	start := len(b)
	b = appendOptString(b, `,"name":`, ls.Name)
	b = appendJSONString(append(b, `,"status":`...), ls.Status)
	b[start] = '{' // the first field's comma opens the object
	b = append(b, `,"over_limit":`...)
	b = strconv.AppendBool(b, ls.OverLimit)
	if ls.Shadow {
		b = append(b, `,"shadow":true`...)
	}
	b = appendOptString(b, `,"source":`, ls.Source)
	b = appendOptString(b, `,"route":`, ls.Route)
	b = appendOptString(b, `,"algorithm":`, ls.Algorithm)
	b = appendOptInt(b, `,"rate":`, ls.Rate)
	b = appendOptString(b, `,"period":`, ls.Period)
	b = appendOptInt(b, `,"burst":`, ls.Burst)
	b = appendOptString(b, `,"lease_ttl":`, ls.LeaseTTL)
	b = appendOptString(b, `,"lease":`, ls.Lease)
	b = appendOptString(b, `,"reservation":`, ls.Reservation)
	b = appendOptString(b, `,"zone":`, ls.Zone)
	b = appendOptInt(b, `,"anchor_day":`, int64(ls.AnchorDay))
	b = appendOptInt(b, `,"window_seconds":`, ls.WindowSeconds)
	b = appendIntField(b, `,"remaining":`, ls.Remaining)
	b = appendIntField(b, `,"reset_after_ms":`, ls.ResetAfterMs)
	b = appendIntField(b, `,"retry_after_ms":`, ls.RetryAfterMs)
	b = appendOptString(b, `,"decided_by":`, ls.DecidedBy)
	return append(b, '}')
}

func appendIntField(b []byte, key string, v int64) []byte {
	return strconv.AppendInt(append(b, key...), v, 10)
}

func appendOptInt(b []byte, key string, v int64) []byte {
	if v == 0 {
		return b
	}
	return appendIntField(b, key, v)
}

func appendOptString(b []byte, key, s string) []byte {
	if s == "" {
		return b
	}
	return appendJSONString(append(b, key...), s)
}

// appendJSONString appends s as a JSON string, as json.Marshal writes it: printable
// ASCII but '"', '\\', '<', '>' and '&' as is, anything else through json.Marshal.
func appendJSONString(b []byte, s string) []byte {
	for i := 0; i < len(s); i++ {
		if c := s[i]; c < 0x20 || c > 0x7e || c == '"' || c == '\\' || c == '<' || c == '>' || c == '&' {
			q, _ := json.Marshal(s)
			return append(b, q...)
		}
	}
	b = append(b, '"')
	b = append(b, s...)
	return append(b, '"')
}

// writeCheckResponse writes r with status, as writeJSON would.
func writeCheckResponse(w http.ResponseWriter, status int, r *CheckResponse) {
	bp := jsonBuffers.Get().(*[]byte)
	body := append(appendCheckResponse((*bp)[:0], r), '\n')
	writeBody(w, status, "application/json", body)
	if cap(body) <= maxPooledJSON {
		*bp = body
		jsonBuffers.Put(bp)
	}
}

// jsonBuffers holds the buffers answers are written in, up to maxPooledJSON.
var jsonBuffers = sync.Pool{New: func() any { b := make([]byte, 0, 1024); return &b }}

const maxPooledJSON = 16 << 10
