// Package keys builds rate-limit keys: who is limited (a user, an API key, a client IP),
// for which route and tier, under which policy.
//
// # Keys
//
// A Key is five fields: Policy, Kind, ID, Route and Tier. Key.String joins them with ':'
// after percent-escaping, in each field, the bytes '%', ':', '{', '}' and every byte outside
// printable ASCII (space included). Because no escaped field contains ':', and escaping is
// undone exactly by ParseKey, two different Keys never give one string: the map is
// injective, and ParseKey is its inverse. The escaped form also never contains '{' or '}',
// so a Redis store can put it inside a hash tag without changing the slot.
//
// # API keys
//
// A raw API key must never reach the store, a log line or a response header. Hasher turns
// it into HMAC-SHA256(secret, key), hex or base64url encoded, and the raw key goes nowhere
// else: the Identity carries only the MAC. The secret keeps the MAC from being reversed by
// hashing a dictionary of likely keys; rotate it and every API-key limit starts afresh.
//
// # Client IP
//
// ClientIP finds the address to limit. The connection's peer address is used unless the
// peer is inside one of the configured trusted proxy prefixes; only then is the one
// forwarding header the operator names read (X-Forwarded-For by default, or X-Real-IP, or
// RFC 7239 Forwarded, as nginx's real_ip_header), and the client is the right-most hop
// that is not itself a trusted proxy. A header sent by an untrusted peer is ignored, and
// so is every other forwarding header, so a client cannot choose its own address. IPv4-mapped IPv6 addresses are
// treated as IPv4, zones are dropped, and IPv6 clients are aggregated to a prefix (/64 by
// default) because one subscriber usually holds a whole /64 and could otherwise rotate
// through 2^64 addresses to escape a per-IP limit.
package keys
