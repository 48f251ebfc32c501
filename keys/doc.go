// Package keys builds rate-limit keys: who is limited (a user, an API key, a client IP),
// for which route and tier, under which policy.
//
// A [Key] is five fields: Policy, Kind, ID, Route and Tier. Key.String joins them with ':'
// after percent-escaping, in each field, the bytes '%', ':', '{', '}' and every byte outside
// printable ASCII (space included). Because no escaped field contains ':', and escaping is
// undone exactly by ParseKey, two different Keys never give one string: the map is
// injective, and ParseKey is its inverse. The escaped form also never contains '{' or '}',
// so a Redis store can put it inside a hash tag without changing the slot.
//
// A raw API key must never reach the store, a log line or a response header: [Hasher]
// turns it into HMAC-SHA256(secret, key), and the Identity carries only the MAC; rotate
// the secret and every API-key limit starts afresh. [ClientIP] finds the address to limit,
// believing one forwarding header only from trusted proxies, and aggregates IPv6 clients
// to a prefix (/64 by default), since one subscriber usually holds a whole /64.
package keys
