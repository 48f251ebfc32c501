package server

import (
	"net/http"
	"time"
)

// Timeouts are the timeouts of an HTTP listener, as the fields of http.Server of the same
// names; a zero field takes the default.
type Timeouts struct {
	// ReadHeader bounds reading a request's headers.
	ReadHeader time.Duration
	// Read bounds reading a whole request, body included, from the connection's accept
	// (or the end of the previous request).
	Read time.Duration
	// Write bounds writing the response, from the end of reading the request's headers.
	Write time.Duration
	// Idle bounds how long a keep-alive connection waits for its next request.
	Idle time.Duration
}

// DefaultHTTPTimeouts suit the JSON API's small, quick requests: a slow client is cut
// off long before it can pin many connections.
var DefaultHTTPTimeouts = Timeouts{ReadHeader: 10 * time.Second, Read: 30 * time.Second, Write: 30 * time.Second, Idle: 2 * time.Minute}

// DefaultProxyTimeouts suit `sluice proxy`, whose upstream's uploads and answers may take
// minutes; headers still come within seconds.
var DefaultProxyTimeouts = Timeouts{ReadHeader: 10 * time.Second, Read: 5 * time.Minute, Write: 5 * time.Minute, Idle: 2 * time.Minute}

// Or returns t with each zero field taken from def.
func (t Timeouts) Or(def Timeouts) Timeouts {
	return Timeouts{ReadHeader: orPositive(t.ReadHeader, def.ReadHeader),
		Read: orPositive(t.Read, def.Read), Write: orPositive(t.Write, def.Write),
		Idle: orPositive(t.Idle, def.Idle)}
}

// orPositive is v when positive, else def.
func orPositive[T int | time.Duration](v, def T) T {
	if v > 0 {
		return v
	}
	return def
}

// Server returns an http.Server for h with these timeouts.
func (t Timeouts) Server(h http.Handler) *http.Server {
	return &http.Server{Handler: h, ReadHeaderTimeout: t.ReadHeader, ReadTimeout: t.Read, WriteTimeout: t.Write, IdleTimeout: t.Idle}
}
