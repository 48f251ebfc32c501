package server

import (
	"bytes"
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"

	ratelimitv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	typev3 "github.com/envoyproxy/go-control-plane/envoy/type/v3"
	"google.golang.org/grpc/mem"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/wrapperspb"
)

// randText returns a short string, sometimes empty, sometimes long enough for a
// two-byte length, sometimes not UTF-8 (for encoding with protowire only: proto.Marshal
// refuses it).
func randText(r *rand.Rand, utf8Only bool) string {
	switch r.IntN(12) {
	case 0:
		return ""
	case 1:
		return string(bytes.Repeat([]byte{'x'}, 100+r.IntN(200)))
	case 2:
		return "é→" + fmt.Sprint(r.Uint32())
	case 3:
		if !utf8Only {
			return "bad\xff" + fmt.Sprint(r.IntN(10))
		}
	}
	return fmt.Sprintf("%c%d", 'a'+rune(r.IntN(26)), r.IntN(1000))
}

// randVarint returns 0, a small value or one of any size.
func randVarint(r *rand.Rand) uint64 {
	switch r.IntN(4) {
	case 0:
		return 0
	case 1:
		return uint64(r.IntN(200))
	case 2:
		return r.Uint64() >> r.IntN(64)
	}
	return uint64(r.IntN(5))
}

func randRequest(r *rand.Rand) *rlsv3.RateLimitRequest {
	req := &rlsv3.RateLimitRequest{Domain: randText(r, true), HitsAddend: uint32(randVarint(r))}
	for range r.IntN(4) + r.IntN(2)*r.IntN(6) {
		d := &ratelimitv3.RateLimitDescriptor{IsNegativeHits: r.IntN(5) == 0}
		for range r.IntN(5) {
			d.Entries = append(d.Entries, &ratelimitv3.RateLimitDescriptor_Entry{Key: randText(r, true), Value: randText(r, true)})
		}
		if r.IntN(4) == 0 {
			d.Limit = &ratelimitv3.RateLimitDescriptor_RateLimitOverride{
				RequestsPerUnit: uint32(randVarint(r)), Unit: typev3.RateLimitUnit(int32(randVarint(r)))}
			if r.IntN(2) == 0 {
				d.Limit.UnitMultiplier = wrapperspb.UInt32(uint32(randVarint(r)))
			}
		}
		if r.IntN(4) == 0 {
			d.HitsAddend = wrapperspb.UInt64(randVarint(r))
		}
		req.Descriptors = append(req.Descriptors, d)
	}
	return req
}

// mutate returns b changed in one of the ways a peer or an attacker could: a field
// number or wire type no message has, a second message merged in, a string that is not
// UTF-8, a byte changed, a message cut short.
func mutate(r *rand.Rand, b []byte, other func() []byte) []byte {
	b = slices.Clone(b)
	switch r.IntN(8) {
	case 0: // an unknown field
		b = protowire.AppendTag(b, protowire.Number(4+r.IntN(40)), protowire.VarintType)
		return protowire.AppendVarint(b, randVarint(r))
	case 1: // a known field number with another wire type
		b = protowire.AppendTag(b, protowire.Number(1+r.IntN(3)), protowire.Fixed32Type)
		return protowire.AppendFixed32(b, r.Uint32())
	case 2: // two messages merged
		return append(b, other()...)
	case 3: // a string that is not UTF-8
		return protowire.AppendString(protowire.AppendTag(b, 1, protowire.BytesType), "\xc3(")
	case 4, 5:
		if len(b) > 0 {
			b[r.IntN(len(b))] ^= byte(1 + r.IntN(255))
		}
		return b
	case 6:
		if len(b) > 0 {
			return b[:r.IntN(len(b))]
		}
	}
	return b
}

// checkDecode decodes b as a RateLimitRequest with rlsCodec (whole and split in two
// buffers) and with proto.Unmarshal, and fails unless both refuse it or both return
// equal messages. Where proto.Unmarshal refuses b for a string that is not UTF-8, the
// reference is protobuf's own decoding of b as its twin (decodeLenient): a string
// is decided as its bytes.
func checkDecode(t testing.TB, c rlsCodec, b []byte) {
	t.Helper()
	want := new(rlsv3.RateLimitRequest)
	wantErr := proto.Unmarshal(b, want)
	if wantErr != nil && strings.Contains(wantErr.Error(), "invalid UTF-8") {
		want = new(rlsv3.RateLimitRequest)
		wantErr = decodeLenient(b, want) // nil unless b is also malformed further on
	}
	bufs := []mem.BufferSlice{{mem.SliceBuffer(b)}}
	if len(b) > 1 {
		bufs = append(bufs, mem.BufferSlice{mem.SliceBuffer(b[:len(b)/2]), mem.SliceBuffer(b[len(b)/2:])})
	}
	for _, data := range bufs {
		got := new(rlsv3.RateLimitRequest)
		err := c.Unmarshal(data, got)
		if (err == nil) != (wantErr == nil) {
			t.Fatalf("decoding %x: error %v, proto.Unmarshal's %v", b, err, wantErr)
		}
		if err == nil && !proto.Equal(got, want) {
			t.Fatalf("decoding %x:\n got %v\nwant %v", b, got, want)
		}
	}
}

// FuzzRLSCodec: any bytes decode as a RateLimitRequest as proto.Unmarshal decodes them
// (or are refused by both), except that a string that is not UTF-8 is decoded as its
// bytes.
func FuzzRLSCodec(f *testing.F) {
	r := rand.New(rand.NewPCG(25, 2))
	marshal := func() []byte {
		b, _ := proto.Marshal(randRequest(r))
		return b
	}
	for range 32 {
		f.Add(mutate(r, marshal(), marshal))
	}
	f.Add([]byte{0x12, 0x02, 0x12, 0x00, 0x12, 0x02, 0x12, 0x00}) // a limit sent twice
	c := newRLSCodec()
	f.Fuzz(func(t *testing.T, b []byte) { checkDecode(t, c, b) })
}
