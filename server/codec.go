package server

import (
	"unicode/utf8"
	"unsafe"

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
// RateLimitResponse itself, with protowire; a message holding a field it does not handle
// (an unknown field, a message field sent twice, a nil element, a response's quota or
// dynamic_metadata) goes to decodeLenient or to gRPC's proto codec. Its result is the
// proto codec's (proto.Equal messages from the same bytes, the same bytes from the same
// message, the same errors), except that a received string may hold any bytes: Envoy
// forwards header bytes as they came, and each string is decided as its bytes, never
// refused (an error Envoy would fail open on).
//
// A decoded request's strings share one copy of its bytes, and a request of one
// descriptor of at most smallEntries entries is one block; an encoded response of at
// most answerBytes is one block too.
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
		// What proto refused for a string's bytes alone (an RLQS report's bucket id).
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

// decodeRequest decodes b into r as proto.Unmarshal does, strings as their bytes, and
// reports whether it did: false (r untouched) for a message holding what the codec does
// not handle.
func decodeRequest(b []byte, r *rlsv3.RateLimitRequest) bool {
	var d decoder
	if !d.request(b, nil) {
		return false
	}
	nd, ne := d.nd, d.ne
	d = decoder{fill: true}
	if nd == 1 && ne <= smallEntries {
		s := new(smallRequest)
		s.descPtr[0] = &s.descs[0]
		for i := range ne {
			s.entPtr[i] = &s.entries[i]
		}
		d.descs, d.entries = s.descPtr[:], s.entPtr[:ne]
	} else {
		d.descs = pointers[ratelimitv3.RateLimitDescriptor](nd)
		d.entries = pointers[ratelimitv3.RateLimitDescriptor_Entry](ne)
	}
	r.Reset()
	if nd > 0 {
		r.Descriptors = d.descs[:0:nd]
	}
	text := string(b) // the one copy the strings share: b is gRPC's buffer
	d.request(unsafe.Slice(unsafe.StringData(text), len(text)), r)
	return true
}

// pointers returns pointers to n new values, made in one block.
func pointers[T any](n int) []*T {
	vs, ps := make([]T, n), make([]*T, n)
	for i := range vs {
		ps[i] = &vs[i]
	}
	return ps
}

// decoder walks an encoded RateLimitRequest twice: first to check that it holds only
// fields the codec handles and to count its descriptors (nd) and entries (ne), then, with
// fill, to decode it, taking its descriptors and entries in order from descs and entries.
type decoder struct {
	fill    bool
	descs   []*ratelimitv3.RateLimitDescriptor
	entries []*ratelimitv3.RateLimitDescriptor_Entry
	nd, ne  int
}

func (d *decoder) request(b []byte, r *rlsv3.RateLimitRequest) bool {
	for len(b) > 0 {
		num, typ, x, v, n := consumeField(b)
		switch {
		case n < 0:
			return false
		case num == reqDomain && typ == protowire.BytesType:
			if d.fill {
				r.Domain = shared(v)
			}
		case num == reqDescriptors && typ == protowire.BytesType:
			if !d.descriptor(v, r) {
				return false
			}
		case num == reqHitsAddend && typ == protowire.VarintType:
			if d.fill {
				r.HitsAddend = uint32(x)
			}
		default:
			return false
		}
		b = b[n:]
	}
	return true
}

func (d *decoder) descriptor(b []byte, r *rlsv3.RateLimitRequest) bool {
	var desc *ratelimitv3.RateLimitDescriptor
	if d.fill {
		desc = d.descs[d.nd]
		r.Descriptors = append(r.Descriptors, desc)
	}
	d.nd++
	first := d.ne
	var limit, hits bool // a message field sent twice is merged: left to proto
	for len(b) > 0 {
		num, typ, x, v, n := consumeField(b)
		switch {
		case n < 0:
			return false
		case num == descEntries && typ == protowire.BytesType:
			if !d.entry(v) {
				return false
			}
		case num == descLimit && typ == protowire.BytesType && !limit:
			limit = true
			var o *ratelimitv3.RateLimitDescriptor_RateLimitOverride
			if d.fill {
				o = new(ratelimitv3.RateLimitDescriptor_RateLimitOverride)
				desc.Limit = o
			}
			if !decodeOverride(v, o) {
				return false
			}
		case num == descHitsAddend && typ == protowire.BytesType && !hits:
			hits = true
			w, ok := decodeWrapper(v)
			if !ok {
				return false
			}
			if d.fill {
				desc.HitsAddend = &wrapperspb.UInt64Value{Value: w}
			}
		case num == descIsNegativeHits && typ == protowire.VarintType:
			if d.fill {
				desc.IsNegativeHits = x != 0
			}
		default:
			return false
		}
		b = b[n:]
	}
	if d.fill && d.ne > first {
		desc.Entries = d.entries[first:d.ne:d.ne]
	}
	return true
}

func (d *decoder) entry(b []byte) bool {
	var e *ratelimitv3.RateLimitDescriptor_Entry
	if d.fill {
		e = d.entries[d.ne]
	}
	d.ne++
	for len(b) > 0 {
		num, typ, _, v, n := consumeField(b)
		if n < 0 || (num != entryKey && num != entryValue) || typ != protowire.BytesType {
			return false
		}
		switch {
		case e == nil:
		case num == entryKey:
			e.Key = shared(v)
		default:
			e.Value = shared(v)
		}
		b = b[n:]
	}
	return true
}

// decodeOverride decodes a limit override into o, or only checks it when o is nil.
func decodeOverride(b []byte, o *ratelimitv3.RateLimitDescriptor_RateLimitOverride) bool {
	var mult bool
	for len(b) > 0 {
		num, typ, x, v, n := consumeField(b)
		switch {
		case n < 0:
			return false
		case num == overrideRequestsPerUnit && typ == protowire.VarintType:
			if o != nil {
				o.RequestsPerUnit = uint32(x)
			}
		case num == overrideUnit && typ == protowire.VarintType:
			if o != nil {
				o.Unit = typev3.RateLimitUnit(int32(x))
			}
		case num == overrideUnitMultiplier && typ == protowire.BytesType && !mult:
			mult = true
			w, ok := decodeWrapper(v)
			if !ok {
				return false
			}
			if o != nil {
				o.UnitMultiplier = &wrapperspb.UInt32Value{Value: uint32(w)}
			}
		default:
			return false
		}
		b = b[n:]
	}
	return true
}

// decodeWrapper decodes an encoded UInt32Value or UInt64Value: the last value written, as
// proto.Unmarshal keeps.
func decodeWrapper(b []byte) (x uint64, ok bool) {
	for len(b) > 0 {
		num, typ, v, _, n := consumeField(b)
		if n < 0 || num != wrapperValue || typ != protowire.VarintType {
			return 0, false
		}
		x, b = v, b[n:]
	}
	return x, true
}

// shared is v as a string sharing its bytes, which must never be written: the bytes
// of decodeRequest's copy of the message.
func shared(v []byte) string {
	if len(v) == 0 {
		return ""
	}
	return unsafe.String(&v[0], len(v))
}

// consumeField consumes the field b starts with: its number, its wire type and its
// value, x for a varint, v for a length-delimited field; n < 0 when b is malformed or
// the field has another wire type (no field the codec handles does). It is protowire's
// Consume functions, quicker for one-byte keys, varints and lengths; a key of field
// number 0, which protowire refuses, is returned as such (no message has that field).
func consumeField(b []byte) (num protowire.Number, typ protowire.Type, x uint64, v []byte, n int) {
	if len(b) > 0 && b[0] < 0x80 {
		num, typ, n = protowire.Number(b[0]>>3), protowire.Type(b[0]&7), 1
	} else if num, typ, n = protowire.ConsumeTag(b); n < 0 {
		return 0, 0, 0, nil, -1
	}
	b = b[n:]
	m := -1
	switch {
	case typ == protowire.VarintType && len(b) > 0 && b[0] < 0x80:
		x, m = uint64(b[0]), 1
	case typ == protowire.VarintType:
		x, m = protowire.ConsumeVarint(b)
	case typ == protowire.BytesType && len(b) > 0 && b[0] < 0x80 && int(b[0]) < len(b):
		v, m = b[1:1+b[0]], 1+int(b[0])
	case typ == protowire.BytesType:
		v, m = protowire.ConsumeBytes(b)
	}
	if m < 0 {
		return 0, 0, 0, nil, -1
	}
	return num, typ, x, v, n + m
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
		if l := s.CurrentLimit; l != nil && (!plain(l) || !utf8.ValidString(l.Name) ||
			l.UnitMultiplier != nil && !plain(l.UnitMultiplier)) {
			return false
		}
		if d := s.DurationUntilReset; d != nil && !plain(d) {
			return false
		}
	}
	for _, hs := range [2][]*corev3.HeaderValue{r.ResponseHeadersToAdd, r.RequestHeadersToAdd} {
		for _, h := range hs {
			if h == nil || !plain(h) || !utf8.ValidString(h.Key) || !utf8.ValidString(h.Value) {
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
	for _, hs := range [2][]*corev3.HeaderValue{r.ResponseHeadersToAdd, r.RequestHeadersToAdd} {
		for _, h := range hs {
			n += bytesLen(headerLen(h), false)
		}
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
	for k, hs := range [2][]*corev3.HeaderValue{r.ResponseHeadersToAdd, r.RequestHeadersToAdd} {
		for _, h := range hs {
			b = appendHeader(appendLen(b, respResponseHeadersToAdd+protowire.Number(k), headerLen(h)), h)
		}
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
