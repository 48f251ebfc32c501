package server

import (
	"unicode/utf8"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	ratelimitv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	typev3 "github.com/envoyproxy/go-control-plane/envoy/type/v3"
	"google.golang.org/grpc/encoding"
	grpcproto "google.golang.org/grpc/encoding/proto"
	"google.golang.org/grpc/mem"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/wrapperspb"
)

// rlsCodec is the gRPC server's codec. It decodes a RateLimitRequest and encodes a
// RateLimitResponse itself, with protowire, into the generated message types. A
// RateLimitRequest holding something the quick decoder does not handle (an unknown
// field, a field it does not know, a message field sent twice) goes to decodeLenient;
// every other message, and a RateLimitResponse holding something the encoder does not
// handle (a nil element of a repeated field, a response's quota or dynamic_metadata),
// goes to gRPC's proto codec, and from there to decodeLenient when proto refuses it for
// a string that is not UTF-8 (an RLQS report's bucket id). Its result is the proto
// codec's (the same message, proto.Equal, from the same bytes; the same bytes from the
// same message; the same errors) with one exception: a received message's strings may
// hold any bytes. Envoy
// forwards header bytes as they came, and each string is decided as its bytes, so a
// value that is not UTF-8 is a distinct value, never an error that Envoy would fail open
// on.
//
// A decoded request's strings share one copy of the message's bytes, and a request of
// one descriptor of at most smallEntries entries has its descriptor and entries in one
// block; an encoded response is one block (its bytes and the mem.Buffer naming them)
// when it fits answerBytes.
type rlsCodec struct {
	proto encoding.CodecV2
}

func newRLSCodec() rlsCodec {
	return rlsCodec{proto: encoding.GetCodecV2(grpcproto.Name)}
}

// Name is the proto codec's: the codec speaks the same content-subtype.
func (rlsCodec) Name() string { return grpcproto.Name }

// Marshal encodes v.
func (c rlsCodec) Marshal(v any) (mem.BufferSlice, error) {
	if r, ok := v.(*rlsv3.RateLimitResponse); ok && r != nil {
		if encodable(r) {
			return encodeResponse(r), nil
		}
	}
	return c.proto.Marshal(v)
}

// Unmarshal decodes data into v, a message gRPC has just allocated.
func (c rlsCodec) Unmarshal(data mem.BufferSlice, v any) error {
	if r, ok := v.(*rlsv3.RateLimitRequest); ok && r != nil {
		var b []byte
		if len(data) == 1 {
			b = data[0].ReadOnlyData()
		} else {
			b = data.Materialize()
		}
		if decodeRequest(b, r) {
			return nil
		}
		return decodeLenient(b, r)
	}
	err := c.proto.Unmarshal(data, v)
	if m, ok := v.(proto.Message); ok && err != nil {
		// The twin reads the same wire format without the UTF-8 check, so it decodes
		// exactly what proto refused for a string's bytes alone (an RLQS report's bucket
		// id, say), and refuses the rest; proto's error then stands.
		if decodeLenient(data.Materialize(), m) == nil {
			return nil
		}
	}
	return err
}

// The field numbers of the messages the codec handles (rls.proto, ratelimit.proto,
// base.proto, wrappers.proto, duration.proto).
const (
	reqDomain      = 1 // RateLimitRequest
	reqDescriptors = 2
	reqHitsAddend  = 3

	descEntries        = 1 // RateLimitDescriptor
	descLimit          = 2
	descHitsAddend     = 3
	descIsNegativeHits = 4

	entryKey   = 1 // RateLimitDescriptor.Entry
	entryValue = 2

	overrideRequestsPerUnit = 1 // RateLimitDescriptor.RateLimitOverride
	overrideUnit            = 2
	overrideUnitMultiplier  = 3

	wrapperValue = 1 // UInt32Value, UInt64Value

	respOverallCode          = 1 // RateLimitResponse
	respStatuses             = 2
	respResponseHeadersToAdd = 3
	respRequestHeadersToAdd  = 4
	respRawBody              = 5

	statusCode               = 1 // RateLimitResponse.DescriptorStatus
	statusCurrentLimit       = 2
	statusLimitRemaining     = 3
	statusDurationUntilReset = 4

	limitRequestsPerUnit = 1 // RateLimitResponse.RateLimit
	limitUnit            = 2
	limitName            = 3
	limitUnitMultiplier  = 4

	headerKey      = 1 // HeaderValue
	headerValue    = 2
	headerRawValue = 3

	durationSeconds = 1 // Duration
	durationNanos   = 2
)

// smallEntries is the most entries of a request's only descriptor that smallRequest
// holds.
const smallEntries = 3

// smallRequest holds the pieces of a request of one descriptor of at most smallEntries
// entries.
type smallRequest struct {
	descs   [1]ratelimitv3.RateLimitDescriptor
	descPtr [1]*ratelimitv3.RateLimitDescriptor
	entries [smallEntries]ratelimitv3.RateLimitDescriptor_Entry
	entPtr  [smallEntries]*ratelimitv3.RateLimitDescriptor_Entry
}

// requestShape walks an encoded RateLimitRequest and returns its number of descriptors
// and of entries (all descriptors together); ok is false for a message decodeRequest
// does not handle, which decodeLenient then decodes (or refuses). A string may hold
// any bytes.
func requestShape(b []byte) (descs, entries int, ok bool) {
	for len(b) > 0 {
		num, typ, n := consumeTag(b)
		if n < 0 {
			return 0, 0, false
		}
		b = b[n:]
		switch {
		case num == reqDomain && typ == protowire.BytesType:
			_, n := consumeBytes(b)
			if n < 0 {
				return 0, 0, false
			}
			b = b[n:]
		case num == reqDescriptors && typ == protowire.BytesType:
			v, n := consumeBytes(b)
			if n < 0 {
				return 0, 0, false
			}
			e, ok := descriptorShape(v)
			if !ok {
				return 0, 0, false
			}
			descs++
			entries += e
			b = b[n:]
		case num == reqHitsAddend && typ == protowire.VarintType:
			_, n := consumeVarint(b)
			if n < 0 {
				return 0, 0, false
			}
			b = b[n:]
		default:
			return 0, 0, false
		}
	}
	return descs, entries, true
}

// descriptorShape is requestShape for one RateLimitDescriptor: its number of entries.
func descriptorShape(b []byte) (entries int, ok bool) {
	var limit, hits bool
	for len(b) > 0 {
		num, typ, n := consumeTag(b)
		if n < 0 {
			return 0, false
		}
		b = b[n:]
		switch {
		case num == descEntries && typ == protowire.BytesType:
			v, n := consumeBytes(b)
			if n < 0 || !entryShape(v) {
				return 0, false
			}
			entries++
			b = b[n:]
		case num == descLimit && typ == protowire.BytesType && !limit:
			v, n := consumeBytes(b)
			if n < 0 || !overrideShape(v) {
				return 0, false
			}
			limit = true
			b = b[n:]
		case num == descHitsAddend && typ == protowire.BytesType && !hits:
			v, n := consumeBytes(b)
			if n < 0 || !wrapperShape(v) {
				return 0, false
			}
			hits = true
			b = b[n:]
		case num == descIsNegativeHits && typ == protowire.VarintType:
			_, n := consumeVarint(b)
			if n < 0 {
				return 0, false
			}
			b = b[n:]
		default:
			return 0, false
		}
	}
	return entries, true
}

// entryShape reports whether decodeRequest handles an encoded descriptor entry.
func entryShape(b []byte) bool {
	for len(b) > 0 {
		num, typ, n := consumeTag(b)
		if n < 0 || (num != entryKey && num != entryValue) || typ != protowire.BytesType {
			return false
		}
		b = b[n:]
		_, n = consumeBytes(b)
		if n < 0 {
			return false
		}
		b = b[n:]
	}
	return true
}

// overrideShape reports whether decodeRequest handles an encoded limit override.
func overrideShape(b []byte) bool {
	var mult bool
	for len(b) > 0 {
		num, typ, n := consumeTag(b)
		if n < 0 {
			return false
		}
		b = b[n:]
		switch {
		case (num == overrideRequestsPerUnit || num == overrideUnit) && typ == protowire.VarintType:
			_, n = consumeVarint(b)
		case num == overrideUnitMultiplier && typ == protowire.BytesType && !mult:
			var v []byte
			v, n = consumeBytes(b)
			if n >= 0 && !wrapperShape(v) {
				return false
			}
			mult = true
		default:
			return false
		}
		if n < 0 {
			return false
		}
		b = b[n:]
	}
	return true
}

// wrapperShape reports whether decodeRequest handles an encoded UInt32Value or
// UInt64Value.
func wrapperShape(b []byte) bool {
	for len(b) > 0 {
		num, typ, n := consumeTag(b)
		if n < 0 || num != wrapperValue || typ != protowire.VarintType {
			return false
		}
		b = b[n:]
		if _, n = consumeVarint(b); n < 0 {
			return false
		}
		b = b[n:]
	}
	return true
}

// decodeRequest decodes b into r as proto.Unmarshal does, strings as their bytes, and
// reports whether it did: false (r untouched) for a message requestShape does not accept.
func decodeRequest(b []byte, r *rlsv3.RateLimitRequest) bool {
	nd, ne, ok := requestShape(b)
	if !ok {
		return false
	}
	r.Reset()
	d := decoder{text: string(b)}
	if nd == 1 && ne <= smallEntries {
		s := new(smallRequest)
		s.descPtr[0] = &s.descs[0]
		for i := range ne {
			s.entPtr[i] = &s.entries[i]
		}
		d.descs, d.descPtr = s.descs[:], s.descPtr[:]
		d.entries, d.entPtr = s.entries[:ne], s.entPtr[:ne]
	} else if nd > 0 {
		d.descs = make([]ratelimitv3.RateLimitDescriptor, nd)
		d.descPtr = make([]*ratelimitv3.RateLimitDescriptor, nd)
		for i := range d.descs {
			d.descPtr[i] = &d.descs[i]
		}
		if ne > 0 {
			d.entries = make([]ratelimitv3.RateLimitDescriptor_Entry, ne)
			d.entPtr = make([]*ratelimitv3.RateLimitDescriptor_Entry, ne)
			for i := range d.entries {
				d.entPtr[i] = &d.entries[i]
			}
		}
	}
	if nd > 0 {
		r.Descriptors = d.descPtr[:0:nd]
	}
	for i := 0; i < len(b); {
		num, _, n := consumeTag(b[i:])
		i += n
		switch num {
		case reqDomain:
			v, n := consumeBytes(b[i:])
			r.Domain = d.text[i+n-len(v) : i+n]
			i += n
		case reqDescriptors:
			v, n := consumeBytes(b[i:])
			r.Descriptors = append(r.Descriptors, d.descriptor(v, i+n-len(v)))
			i += n
		default: // reqHitsAddend
			v, n := consumeVarint(b[i:])
			r.HitsAddend = uint32(v)
			i += n
		}
	}
	return true
}

// decoder fills a request's descriptors and entries, in order, from the blocks made for
// them; text is the message's bytes, which its strings share.
type decoder struct {
	text    string
	descs   []ratelimitv3.RateLimitDescriptor
	descPtr []*ratelimitv3.RateLimitDescriptor
	entries []ratelimitv3.RateLimitDescriptor_Entry
	entPtr  []*ratelimitv3.RateLimitDescriptor_Entry
	nd, ne  int
}

// descriptor decodes the next descriptor, b, which starts at off in the message.
func (d *decoder) descriptor(b []byte, off int) *ratelimitv3.RateLimitDescriptor {
	desc := d.descPtr[d.nd]
	d.nd++
	first := d.ne
	for i := 0; i < len(b); {
		num, _, n := consumeTag(b[i:])
		i += n
		switch num {
		case descEntries:
			v, n := consumeBytes(b[i:])
			d.entry(v, off+i+n-len(v))
			i += n
		case descLimit:
			v, n := consumeBytes(b[i:])
			desc.Limit = decodeOverride(v)
			i += n
		case descHitsAddend:
			v, n := consumeBytes(b[i:])
			desc.HitsAddend = &wrapperspb.UInt64Value{Value: wrapperValueOf(v)}
			i += n
		default: // descIsNegativeHits
			v, n := consumeVarint(b[i:])
			desc.IsNegativeHits = v != 0
			i += n
		}
	}
	if d.ne > first {
		desc.Entries = d.entPtr[first:d.ne:d.ne]
	}
	return desc
}

// entry decodes the next entry, b, which starts at off in the message.
func (d *decoder) entry(b []byte, off int) {
	e := d.entPtr[d.ne]
	d.ne++
	for i := 0; i < len(b); {
		num, _, n := consumeTag(b[i:])
		i += n
		v, n := consumeBytes(b[i:])
		s := d.text[off+i+n-len(v) : off+i+n]
		if num == entryKey {
			e.Key = s
		} else {
			e.Value = s
		}
		i += n
	}
}

func decodeOverride(b []byte) *ratelimitv3.RateLimitDescriptor_RateLimitOverride {
	o := new(ratelimitv3.RateLimitDescriptor_RateLimitOverride)
	for len(b) > 0 {
		num, _, n := consumeTag(b)
		b = b[n:]
		switch num {
		case overrideRequestsPerUnit:
			v, n := consumeVarint(b)
			o.RequestsPerUnit = uint32(v)
			b = b[n:]
		case overrideUnit:
			v, n := consumeVarint(b)
			o.Unit = typev3.RateLimitUnit(int32(v))
			b = b[n:]
		default: // overrideUnitMultiplier
			v, n := consumeBytes(b)
			o.UnitMultiplier = &wrapperspb.UInt32Value{Value: uint32(wrapperValueOf(v))}
			b = b[n:]
		}
	}
	return o
}

// wrapperValueOf returns the value of an encoded UInt32Value or UInt64Value that
// wrapperShape accepted: the last one written, as proto.Unmarshal keeps.
func wrapperValueOf(b []byte) uint64 {
	var x uint64
	for len(b) > 0 {
		_, _, n := consumeTag(b)
		b = b[n:]
		v, n := consumeVarint(b)
		x = v
		b = b[n:]
	}
	return x
}

// consumeTag is protowire.ConsumeTag, quicker for a one-byte key. A key of field number
// 0, which protowire refuses, is returned as such: no message has that field, so the
// codec leaves the message to proto, which refuses it.
func consumeTag(b []byte) (protowire.Number, protowire.Type, int) {
	if len(b) > 0 && b[0] < 0x80 {
		return protowire.Number(b[0] >> 3), protowire.Type(b[0] & 7), 1
	}
	return protowire.ConsumeTag(b)
}

// consumeVarint is protowire.ConsumeVarint, quicker for a one-byte varint.
func consumeVarint(b []byte) (uint64, int) {
	if len(b) > 0 && b[0] < 0x80 {
		return uint64(b[0]), 1
	}
	return protowire.ConsumeVarint(b)
}

// consumeBytes is protowire.ConsumeBytes, quicker for a one-byte length.
func consumeBytes(b []byte) ([]byte, int) {
	if len(b) > 0 && b[0] < 0x80 {
		n := 1 + int(b[0])
		if n > len(b) {
			return nil, -1
		}
		return b[1:n], n
	}
	return protowire.ConsumeBytes(b)
}

// validString is utf8.ValidString, quicker for a short ASCII string.
func validString(s string) bool {
	for ; len(s) >= 8; s = s[8:] {
		x := uint64(s[0]) | uint64(s[1])<<8 | uint64(s[2])<<16 | uint64(s[3])<<24 |
			uint64(s[4])<<32 | uint64(s[5])<<40 | uint64(s[6])<<48 | uint64(s[7])<<56
		if x&0x8080808080808080 != 0 {
			return utf8.ValidString(s)
		}
	}
	for i := 0; i < len(s); i++ {
		if s[i] >= 0x80 {
			return utf8.ValidString(s)
		}
	}
	return true
}

// answerBytes is the room for an encoded response in an answerBlock: with the block's
// own fields, 256 bytes, a size class.
const answerBytes = 216

// encoded is an encoded response and the mem.BufferSlice naming it, so that naming it
// allocates nothing more.
type encoded struct {
	buf   mem.SliceBuffer
	slice [1]mem.Buffer
}

// answerBlock is an encoded response of at most answerBytes, in one allocation.
type answerBlock struct {
	encoded
	bytes [answerBytes]byte
}

// encodeResponse encodes r, which encodable accepted, as proto.Marshal does.
func encodeResponse(r *rlsv3.RateLimitResponse) mem.BufferSlice {
	n := responseLen(r)
	var e *encoded
	var b []byte
	if n <= answerBytes {
		blk := new(answerBlock)
		e, b = &blk.encoded, blk.bytes[:0:n]
	} else {
		e, b = new(encoded), make([]byte, 0, n)
	}
	e.buf = appendResponse(b, r)
	e.slice[0] = &e.buf
	return e.slice[:]
}

// plain reports whether m holds no unknown fields.
func plain(m proto.Message) bool { return len(m.ProtoReflect().GetUnknown()) == 0 }

// encodable reports whether encodeResponse handles r: every field it holds is one the
// codec writes, with no unknown fields, no nil element and only UTF-8 strings (which
// proto.Marshal requires); anything else goes to the proto codec, which encodes or
// refuses it.
func encodable(r *rlsv3.RateLimitResponse) bool {
	if r.DynamicMetadata != nil || r.Quota != nil || !plain(r) {
		return false
	}
	for _, s := range r.Statuses {
		if s == nil || s.Quota != nil || !plain(s) {
			return false
		}
		if l := s.CurrentLimit; l != nil && (!plain(l) || !validString(l.Name) ||
			l.UnitMultiplier != nil && !plain(l.UnitMultiplier)) {
			return false
		}
		if d := s.DurationUntilReset; d != nil && !plain(d) {
			return false
		}
	}
	for _, hs := range [2][]*corev3.HeaderValue{r.ResponseHeadersToAdd, r.RequestHeadersToAdd} {
		for _, h := range hs {
			if h == nil || !plain(h) || !validString(h.Key) || !validString(h.Value) {
				return false
			}
		}
	}
	return true
}

// varintLen is the encoded size of a varint field of a small field number, 0 when v is
// 0 (proto3 omits it).
func varintLen(v uint64) int {
	if v == 0 {
		return 0
	}
	return 1 + protowire.SizeVarint(v)
}

// bytesLen is the encoded size of a length-delimited field of a small field number
// holding n bytes, 0 when n is 0 and omit is set (a proto3 string or bytes field).
func bytesLen(n int, omit bool) int {
	if n == 0 && omit {
		return 0
	}
	return 1 + protowire.SizeBytes(n)
}

func responseLen(r *rlsv3.RateLimitResponse) int {
	n := varintLen(uint64(int64(r.OverallCode))) + bytesLen(len(r.RawBody), true)
	for _, s := range r.Statuses {
		n += bytesLen(statusLen(s), false)
	}
	for _, h := range r.ResponseHeadersToAdd {
		n += bytesLen(headerLen(h), false)
	}
	for _, h := range r.RequestHeadersToAdd {
		n += bytesLen(headerLen(h), false)
	}
	return n
}

func statusLen(s *rlsv3.RateLimitResponse_DescriptorStatus) int {
	n := varintLen(uint64(int64(s.Code))) + varintLen(uint64(s.LimitRemaining))
	if l := s.CurrentLimit; l != nil {
		n += bytesLen(limitLen(l), false)
	}
	if d := s.DurationUntilReset; d != nil {
		n += bytesLen(durationLen(d), false)
	}
	return n
}

func limitLen(l *rlsv3.RateLimitResponse_RateLimit) int {
	n := varintLen(uint64(l.RequestsPerUnit)) + varintLen(uint64(int64(l.Unit))) + bytesLen(len(l.Name), true)
	if m := l.UnitMultiplier; m != nil {
		n += bytesLen(varintLen(uint64(m.Value)), false)
	}
	return n
}

func durationLen(d *durationpb.Duration) int {
	return varintLen(uint64(d.Seconds)) + varintLen(uint64(int64(d.Nanos)))
}

func headerLen(h *corev3.HeaderValue) int {
	return bytesLen(len(h.Key), true) + bytesLen(len(h.Value), true) + bytesLen(len(h.RawValue), true)
}

// key is the one-byte key of field num (below 16) of wire type typ.
func key(num protowire.Number, typ protowire.Type) byte { return byte(num)<<3 | byte(typ) }

// appendUvarint is protowire.AppendVarint, quicker for small values.
func appendUvarint(b []byte, v uint64) []byte {
	for v >= 0x80 {
		b = append(b, byte(v)|0x80)
		v >>= 7
	}
	return append(b, byte(v))
}

// appendVarint appends a varint field, nothing when v is 0 (proto3 omits it).
func appendVarint(b []byte, num protowire.Number, v uint64) []byte {
	if v == 0 {
		return b
	}
	return appendUvarint(append(b, key(num, protowire.VarintType)), v)
}

// appendString appends a proto3 string or bytes field, nothing when it is empty.
func appendString[T string | []byte](b []byte, num protowire.Number, s T) []byte {
	if len(s) == 0 {
		return b
	}
	b = appendUvarint(append(b, key(num, protowire.BytesType)), uint64(len(s)))
	return append(b, s...)
}

// appendLen appends the key and length of a message field of n bytes.
func appendLen(b []byte, num protowire.Number, n int) []byte {
	return appendUvarint(append(b, key(num, protowire.BytesType)), uint64(n))
}

// appendResponse appends r in field number order, as proto.Marshal writes it.
func appendResponse(b []byte, r *rlsv3.RateLimitResponse) []byte {
	b = appendVarint(b, respOverallCode, uint64(int64(r.OverallCode)))
	for _, s := range r.Statuses {
		b = appendStatus(appendLen(b, respStatuses, statusLen(s)), s)
	}
	for _, h := range r.ResponseHeadersToAdd {
		b = appendHeader(appendLen(b, respResponseHeadersToAdd, headerLen(h)), h)
	}
	for _, h := range r.RequestHeadersToAdd {
		b = appendHeader(appendLen(b, respRequestHeadersToAdd, headerLen(h)), h)
	}
	return appendString(b, respRawBody, r.RawBody)
}

func appendStatus(b []byte, s *rlsv3.RateLimitResponse_DescriptorStatus) []byte {
	b = appendVarint(b, statusCode, uint64(int64(s.Code)))
	if l := s.CurrentLimit; l != nil {
		b = appendLen(b, statusCurrentLimit, limitLen(l))
		b = appendVarint(b, limitRequestsPerUnit, uint64(l.RequestsPerUnit))
		b = appendVarint(b, limitUnit, uint64(int64(l.Unit)))
		b = appendString(b, limitName, l.Name)
		if m := l.UnitMultiplier; m != nil {
			b = appendLen(b, limitUnitMultiplier, varintLen(uint64(m.Value)))
			b = appendVarint(b, wrapperValue, uint64(m.Value))
		}
	}
	b = appendVarint(b, statusLimitRemaining, uint64(s.LimitRemaining))
	if d := s.DurationUntilReset; d != nil {
		b = appendLen(b, statusDurationUntilReset, durationLen(d))
		b = appendVarint(b, durationSeconds, uint64(d.Seconds))
		b = appendVarint(b, durationNanos, uint64(int64(d.Nanos)))
	}
	return b
}

func appendHeader(b []byte, h *corev3.HeaderValue) []byte {
	b = appendString(b, headerKey, h.Key)
	b = appendString(b, headerValue, h.Value)
	return appendString(b, headerRawValue, h.RawValue)
}
