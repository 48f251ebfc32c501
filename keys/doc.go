// Package keys builds rate-limit keys: who is limited (a user, an API key, a client IP),
// for which route and tier, under which policy.
//
// A [Key] is five fields: Policy, Kind, ID, Route and Tier. Key.String joins them with ':'
// after percent-escaping, in each field, the bytes '%', ':', '{', '}' and every byte outside
// printable ASCII (space included): two different Keys never give one string, ParseKey is
// its inverse, and a Redis store can put it inside a hash tag without changing the slot.
//
// A raw API key never reaches the store, a log line or a header: [Hasher] turns it into
// HMAC-SHA256(secret, key). [ClientIP] finds the address to limit, believing one
// forwarding header only from trusted proxies, and aggregates IPv6 clients to a prefix.
package keys
