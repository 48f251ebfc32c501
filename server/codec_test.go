package server

import (
	"bytes"
	"context"
	"fmt"
	"math/rand/v2"
	"net"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	ratelimitv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	typev3 "github.com/envoyproxy/go-control-plane/envoy/type/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/encoding"
	grpcproto "google.golang.org/grpc/encoding/proto"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/mem"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/structpb"
	"google.golang.org/protobuf/types/known/timestamppb"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/sluicehq/sluice/memory"
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

func randHeaders(r *rand.Rand) []*corev3.HeaderValue {
	var hs []*corev3.HeaderValue
	for range r.IntN(4) {
		h := &corev3.HeaderValue{Key: randText(r, true), Value: randText(r, true)}
		if r.IntN(5) == 0 {
			h.RawValue = []byte(randText(r, false))
		}
		hs = append(hs, h)
	}
	return hs
}

func randResponse(r *rand.Rand) *rlsv3.RateLimitResponse {
	resp := &rlsv3.RateLimitResponse{OverallCode: rlsv3.RateLimitResponse_Code(int32(randVarint(r)))}
	for range r.IntN(4) {
		s := &rlsv3.RateLimitResponse_DescriptorStatus{
			Code: rlsv3.RateLimitResponse_Code(r.IntN(3)), LimitRemaining: uint32(randVarint(r))}
		if r.IntN(3) > 0 {
			s.CurrentLimit = &rlsv3.RateLimitResponse_RateLimit{Name: randText(r, true),
				RequestsPerUnit: uint32(randVarint(r)), Unit: rlsv3.RateLimitResponse_RateLimit_Unit(int32(randVarint(r)))}
			if r.IntN(3) == 0 {
				s.CurrentLimit.UnitMultiplier = wrapperspb.UInt32(uint32(randVarint(r)))
			}
		}
		if r.IntN(3) > 0 {
			s.DurationUntilReset = &durationpb.Duration{Seconds: int64(randVarint(r)), Nanos: int32(randVarint(r))}
		}
		if r.IntN(20) == 0 {
			s.Quota = &rlsv3.RateLimitResponse_Quota{Requests: 3, Id: "q"}
		}
		resp.Statuses = append(resp.Statuses, s)
	}
	resp.ResponseHeadersToAdd = randHeaders(r)
	resp.RequestHeadersToAdd = randHeaders(r)
	if r.IntN(5) == 0 {
		resp.RawBody = []byte(randText(r, false))
	}
	switch r.IntN(30) {
	case 0:
		resp.Quota = &rlsv3.RateLimitResponse_Quota{Requests: 1,
			ExpirationSpecifier: &rlsv3.RateLimitResponse_Quota_ValidUntil{ValidUntil: timestamppb.New(time.Unix(5, 0))}}
	case 1:
		resp.DynamicMetadata, _ = structpb.NewStruct(map[string]any{"a": 1.0})
	}
	return resp
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

// checkEncode encodes m with rlsCodec and with proto.Marshal, and fails unless both
// refuse it or both write the same bytes (the same message, for one holding a map,
// which proto.Marshal writes in no fixed order).
func checkEncode(t testing.TB, c rlsCodec, m *rlsv3.RateLimitResponse) {
	t.Helper()
	want, wantErr := proto.Marshal(m)
	data, err := c.Marshal(m)
	if (err == nil) != (wantErr == nil) {
		t.Fatalf("encoding %v: error %v, proto.Marshal's %v", m, err, wantErr)
	}
	if err != nil {
		return
	}
	got := data.Materialize()
	if m.GetDynamicMetadata() != nil {
		back := new(rlsv3.RateLimitResponse)
		if err := proto.Unmarshal(got, back); err != nil || !proto.Equal(back, m) {
			t.Fatalf("encoding %v: wrote %x, which decodes to %v (%v)", m, got, back, err)
		}
		return
	}
	if !bytes.Equal(got, want) {
		t.Fatalf("encoding %v:\n got %x\nwant %x", m, got, want)
	}
}

// TestRLSCodecDifferential: on random requests and answers (any number of descriptors,
// entries, overrides and hits_addend, empty and long strings, varints of every size),
// and on their encodings changed as mutate does, rlsCodec decodes what proto.Unmarshal
// decodes, refuses what it refuses, and writes the bytes proto.Marshal writes.
func TestRLSCodecDifferential(t *testing.T) {
	c := newRLSCodec()
	r := rand.New(rand.NewPCG(25, 1))
	marshal := func(m proto.Message) []byte {
		b, err := proto.MarshalOptions{Deterministic: true}.Marshal(m)
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	const n = codecCases
	var decoded, encoded int // by the codec itself, not the proto codec
	for range n {
		req := randRequest(r)
		b := marshal(req)
		checkDecode(t, c, b)
		if decodeRequest(b, new(rlsv3.RateLimitRequest)) {
			decoded++
		}
		checkDecode(t, c, mutate(r, b, func() []byte { return marshal(randRequest(r)) }))
		// A descriptor changed inside: merged, unknown or malformed fields one level
		// down.
		if len(req.Descriptors) > 0 {
			db := mutate(r, marshal(req.Descriptors[0]), func() []byte {
				if ds := randRequest(r).Descriptors; len(ds) > 0 {
					return marshal(ds[0])
				}
				return nil
			})
			checkDecode(t, c, protowire.AppendBytes(protowire.AppendTag(b, reqDescriptors, protowire.BytesType), db))
		}

		resp := randResponse(r)
		checkEncode(t, c, resp)
		if encodable(resp) {
			encoded++
		}
		if r.IntN(10) == 0 { // unknown fields, as a peer's message would carry them
			withUnknown := new(rlsv3.RateLimitResponse)
			if err := proto.Unmarshal(mutate(r, marshal(resp), func() []byte { return nil }), withUnknown); err == nil {
				checkEncode(t, c, withUnknown)
			}
		}
	}
	// Only the requests and answers that hold a field the codec leaves to proto go
	// there: a test that compared proto with itself would prove nothing.
	if decoded < n*9/10 || encoded < n*8/10 {
		t.Fatalf("the codec decoded %d and encoded %d of %d messages itself", decoded, encoded, n)
	}
	t.Logf("the codec decoded %d and encoded %d of %d messages itself", decoded, encoded, n)
}

// TestRLSCodecRefuses: what proto.Marshal refuses, rlsCodec refuses.
func TestRLSCodecRefuses(t *testing.T) {
	c := newRLSCodec()
	for _, m := range []*rlsv3.RateLimitResponse{
		{ResponseHeadersToAdd: []*corev3.HeaderValue{{Key: "k\xff"}}},
		{Statuses: []*rlsv3.RateLimitResponse_DescriptorStatus{{CurrentLimit: &rlsv3.RateLimitResponse_RateLimit{Name: "\xff"}}}},
	} {
		if _, err := c.Marshal(m); err == nil {
			t.Errorf("encoded %v, which proto.Marshal refuses", m)
		}
	}
	var nilResp *rlsv3.RateLimitResponse
	checkEncode(t, c, nilResp)
	checkEncode(t, c, &rlsv3.RateLimitResponse{Statuses: []*rlsv3.RateLimitResponse_DescriptorStatus{nil}})
	checkDecode(t, c, nil)
}

// FuzzRLSCodec: any bytes decode as a RateLimitRequest as proto.Unmarshal decodes them
// (or are refused by both), and any RateLimitResponse proto.Unmarshal reads from them
// encodes to proto.Marshal's bytes.
func FuzzRLSCodec(f *testing.F) {
	r := rand.New(rand.NewPCG(25, 2))
	for range 16 {
		b, _ := proto.Marshal(randRequest(r))
		f.Add(b)
		b, _ = proto.Marshal(randResponse(r))
		f.Add(b)
	}
	f.Add([]byte{0x12, 0x02, 0x12, 0x00, 0x12, 0x02, 0x12, 0x00}) // a limit sent twice
	c := newRLSCodec()
	f.Fuzz(func(t *testing.T, b []byte) {
		checkDecode(t, c, b)
		resp := new(rlsv3.RateLimitResponse)
		if proto.Unmarshal(b, resp) == nil {
			checkEncode(t, c, resp)
		}
	})
}

// codecFields are the fields of every message rlsCodec reads or writes: handled, those
// it reads or writes itself; fallback, those it leaves to the proto codec.
var codecFields = []struct {
	msg      proto.Message
	handled  []protoreflect.FieldNumber
	fallback []protoreflect.FieldNumber
}{
	{&rlsv3.RateLimitRequest{}, []protoreflect.FieldNumber{reqDomain, reqDescriptors, reqHitsAddend}, nil},
	{&ratelimitv3.RateLimitDescriptor{}, []protoreflect.FieldNumber{descEntries, descLimit, descHitsAddend, descIsNegativeHits}, nil},
	{&ratelimitv3.RateLimitDescriptor_Entry{}, []protoreflect.FieldNumber{entryKey, entryValue}, nil},
	{&ratelimitv3.RateLimitDescriptor_RateLimitOverride{}, []protoreflect.FieldNumber{overrideRequestsPerUnit, overrideUnit, overrideUnitMultiplier}, nil},
	{&wrapperspb.UInt32Value{}, []protoreflect.FieldNumber{wrapperValue}, nil},
	{&wrapperspb.UInt64Value{}, []protoreflect.FieldNumber{wrapperValue}, nil},
	{&rlsv3.RateLimitResponse{}, []protoreflect.FieldNumber{respOverallCode, respStatuses, respResponseHeadersToAdd, respRequestHeadersToAdd, respRawBody}, []protoreflect.FieldNumber{6, 7}},
	{&rlsv3.RateLimitResponse_DescriptorStatus{}, []protoreflect.FieldNumber{statusCode, statusCurrentLimit, statusLimitRemaining, statusDurationUntilReset}, []protoreflect.FieldNumber{5}},
	{&rlsv3.RateLimitResponse_RateLimit{}, []protoreflect.FieldNumber{limitRequestsPerUnit, limitUnit, limitName, limitUnitMultiplier}, nil},
	{&corev3.HeaderValue{}, []protoreflect.FieldNumber{headerKey, headerValue, headerRawValue}, nil},
	{&durationpb.Duration{}, []protoreflect.FieldNumber{durationSeconds, durationNanos}, nil},
}

// TestRLSCodecFields: every field of the messages rlsCodec reads or writes is one it
// handles or leaves to the proto codec, so that a field added to them (a new
// go-control-plane) fails here until the codec knows it; and each handled field, set
// alone, is decoded or encoded by the codec itself, as proto does.
func TestRLSCodecFields(t *testing.T) {
	for _, m := range codecFields {
		d := m.msg.ProtoReflect().Descriptor()
		var got []protoreflect.FieldNumber
		for i := range d.Fields().Len() {
			got = append(got, d.Fields().Get(i).Number())
		}
		want := slices.Sorted(slices.Values(append(slices.Clone(m.handled), m.fallback...)))
		if slices.Sort(got); !slices.Equal(got, want) {
			t.Errorf("%s has fields %v; rlsCodec knows %v: teach it the new ones", d.FullName(), got, want)
		}
	}

	c := newRLSCodec()
	mult := wrapperspb.UInt32(3)
	limit := &rlsv3.RateLimitResponse_RateLimit{Name: "n", RequestsPerUnit: 1, Unit: 2, UnitMultiplier: mult}
	hv := &corev3.HeaderValue{Key: "k", Value: "v", RawValue: []byte("r")}
	status := &rlsv3.RateLimitResponse_DescriptorStatus{Code: 2, CurrentLimit: limit, LimitRemaining: 4,
		DurationUntilReset: &durationpb.Duration{Seconds: 5, Nanos: 6}}
	for i, m := range []*rlsv3.RateLimitResponse{
		{OverallCode: 1},
		{Statuses: []*rlsv3.RateLimitResponse_DescriptorStatus{status}},
		{ResponseHeadersToAdd: []*corev3.HeaderValue{hv}},
		{RequestHeadersToAdd: []*corev3.HeaderValue{hv}},
		{RawBody: []byte("b")},
	} {
		if !encodable(m) {
			t.Errorf("response %d (%v): the codec leaves it to proto", i, m)
		}
		checkEncode(t, c, m)
	}

	override := &ratelimitv3.RateLimitDescriptor_RateLimitOverride{RequestsPerUnit: 1, Unit: 2, UnitMultiplier: mult}
	entry := &ratelimitv3.RateLimitDescriptor_Entry{Key: "k", Value: "v"}
	for i, m := range []*rlsv3.RateLimitRequest{
		{Domain: "d"},
		{HitsAddend: 3},
		{Descriptors: []*ratelimitv3.RateLimitDescriptor{{Entries: []*ratelimitv3.RateLimitDescriptor_Entry{entry}}}},
		{Descriptors: []*ratelimitv3.RateLimitDescriptor{{Limit: override}}},
		{Descriptors: []*ratelimitv3.RateLimitDescriptor{{HitsAddend: wrapperspb.UInt64(7)}}},
		{Descriptors: []*ratelimitv3.RateLimitDescriptor{{IsNegativeHits: true}}},
	} {
		b, err := proto.Marshal(m)
		if err != nil {
			t.Fatal(err)
		}
		got := new(rlsv3.RateLimitRequest)
		if !decodeRequest(b, got) {
			t.Errorf("request %d (%v): the codec leaves it to proto", i, m)
		} else if !proto.Equal(got, m) {
			t.Errorf("request %d: decoded %v, want %v", i, got, m)
		}
	}
}

// TestRLSCodecEndToEnd: over real gRPC, a server with rlsCodec answers every request,
// valid or not, with or without unknown fields, as the same server with the proto codec
// answers it; and the other services (health) are served as before.
func TestRLSCodecEndToEnd(t *testing.T) {
	var now atomic.Int64 // read by the stores' sweepers too
	now.Store(time.Unix(1_800_000_000, 0).UnixNano())
	clock := func() time.Time { return time.Unix(0, now.Load()) }
	dial := func(opts ...grpc.ServerOption) (rlsv3.RateLimitServiceClient, healthpb.HealthClient) {
		store := memory.New(memory.WithClock(clock))
		t.Cleanup(func() { store.Close() })
		s, err := New(Options{Limiter: store, Config: loadConfig(t, "edge.yaml"), Now: clock})
		if err != nil {
			t.Fatal(err)
		}
		s.health.SetServingStatus(RateLimitServiceName, healthpb.HealthCheckResponse_SERVING)
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		g := s.NewGRPCServer(opts...)
		go g.Serve(ln)
		t.Cleanup(g.Stop)
		conn, err := grpc.NewClient(ln.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { conn.Close() })
		return rlsv3.NewRateLimitServiceClient(conn), healthpb.NewHealthClient(conn)
	}
	codecRLS, codecHealth := dial()
	protoRLS, _ := dial(grpc.ForceServerCodecV2(encoding.GetCodecV2(grpcproto.Name)))

	ctx := context.Background()
	hr, err := codecHealth.Check(ctx, &healthpb.HealthCheckRequest{Service: RateLimitServiceName})
	if err != nil || hr.Status != healthpb.HealthCheckResponse_SERVING {
		t.Fatalf("health check: %v, %v", hr, err)
	}

	r := rand.New(rand.NewPCG(25, 3))
	keys := []string{"remote_address", "message_type", "to_number", "api", "other"}
	values := []string{"50.0.0.5", "10.1.2.3", "marketing", "1", "2", ""}
	for i := range 1500 {
		req := &rlsv3.RateLimitRequest{Domain: []string{"edge", "edge", "edge", "", "nope"}[r.IntN(5)], HitsAddend: uint32(r.IntN(3))}
		for range r.IntN(4) {
			d := &ratelimitv3.RateLimitDescriptor{}
			for range r.IntN(3) + 1 {
				d.Entries = append(d.Entries, &ratelimitv3.RateLimitDescriptor_Entry{Key: keys[r.IntN(len(keys))], Value: values[r.IntN(len(values))]})
			}
			if r.IntN(6) == 0 {
				d.Limit = &ratelimitv3.RateLimitDescriptor_RateLimitOverride{RequestsPerUnit: uint32(r.IntN(4)), Unit: typev3.RateLimitUnit(r.IntN(7))}
			}
			if r.IntN(6) == 0 {
				d.HitsAddend = wrapperspb.UInt64(uint64(r.IntN(3)))
			}
			req.Descriptors = append(req.Descriptors, d)
		}
		if r.IntN(8) == 0 { // unknown fields: the codec leaves the request to proto
			b, _ := proto.Marshal(req)
			b = protowire.AppendVarint(protowire.AppendTag(b, 99, protowire.VarintType), 1)
			req = new(rlsv3.RateLimitRequest)
			if err := proto.Unmarshal(b, req); err != nil {
				t.Fatal(err)
			}
		}
		got, gotErr := codecRLS.ShouldRateLimit(ctx, req)
		want, wantErr := protoRLS.ShouldRateLimit(ctx, req)
		if status.Code(gotErr) != status.Code(wantErr) || !proto.Equal(got, want) {
			t.Fatalf("request %d %v:\nrlsCodec answers %v (%v)\nproto answers    %v (%v)", i, req, got, gotErr, want, wantErr)
		}
		if r.IntN(50) == 0 {
			now.Add(int64(time.Duration(r.IntN(90)) * time.Second))
		}
	}
}
