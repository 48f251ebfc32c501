package server

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"

	ratelimitv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlqsv3 "github.com/envoyproxy/go-control-plane/envoy/service/rate_limit_quota/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc/mem"
	"google.golang.org/protobuf/encoding/prototext"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protodesc"
	"google.golang.org/protobuf/types/descriptorpb"
	"google.golang.org/protobuf/types/dynamicpb"
)

// withBytes marshals m, whose strings hold the placeholder "\x01" (and no other byte of
// its encoding is 1), and puts b in each placeholder's place: a message proto.Marshal
// would refuse to write.
func withBytes(t *testing.T, m proto.Message, b byte) []byte {
	t.Helper()
	out, err := proto.MarshalOptions{Deterministic: true}.Marshal(m)
	if err != nil {
		t.Fatal(err)
	}
	return bytes.ReplaceAll(out, []byte{1}, []byte{b})
}

// TestDecodeAnyBytes: the gRPC codec decodes an RLS request and an RLQS report whose
// strings are not UTF-8, each string as its bytes (proto.Unmarshal refuses both), on the
// quick path and on the lenient one (an unknown field); different bytes stay different.
func TestDecodeAnyBytes(t *testing.T) {
	c := newRLSCodec()
	req := &rlsv3.RateLimitRequest{Domain: "edge", Descriptors: []*ratelimitv3.RateLimitDescriptor{{
		Entries: []*ratelimitv3.RateLimitDescriptor_Entry{{Key: "api_key", Value: "Espa\x01a"}}}}}
	for _, b := range []byte{0xf1, 0xff, 0xc3} {
		raw := withBytes(t, req, b)
		if err := proto.Unmarshal(raw, new(rlsv3.RateLimitRequest)); err == nil {
			t.Fatalf("proto.Unmarshal decodes %q: the test proves nothing", raw)
		}
		for name, data := range map[string][]byte{
			"quick":   raw,
			"lenient": protowire.AppendVarint(protowire.AppendTag(raw, 99, protowire.VarintType), 7),
		} {
			got := new(rlsv3.RateLimitRequest)
			if err := c.Unmarshal(mem.BufferSlice{mem.SliceBuffer(data)}, got); err != nil {
				t.Fatalf("%s %x: %v", name, b, err)
			}
			if v := got.Descriptors[0].Entries[0].Value; v != "Espa"+string([]byte{b})+"a" {
				t.Errorf("%s %x: value %q", name, b, v)
			}
		}
	}

	rep := &rlqsv3.RateLimitQuotaUsageReports{Domain: "edge-proxies", BucketQuotaUsages: []*rlqsv3.RateLimitQuotaUsageReports_BucketQuotaUsage{{
		BucketId:           &rlqsv3.BucketId{Bucket: map[string]string{"tenant": "Espa\x01a"}},
		NumRequestsAllowed: 3}}}
	raw := withBytes(t, rep, 0xf1)
	got := new(rlqsv3.RateLimitQuotaUsageReports)
	if err := c.Unmarshal(mem.BufferSlice{mem.SliceBuffer(raw)}, got); err != nil {
		t.Fatalf("RLQS report: %v", err)
	}
	want := proto.Clone(rep).(*rlqsv3.RateLimitQuotaUsageReports)
	want.BucketQuotaUsages[0].BucketId.Bucket["tenant"] = "Espa\xf1a"
	if !proto.Equal(got, want) {
		t.Errorf("RLQS report: got %v, want %v", got, want)
	}
}

// TestUnicodeText: a JSON body is refused exactly when encoding/json would replace
// something in it with U+FFFD.
func TestUnicodeText(t *testing.T) {
	for _, tc := range []struct {
		body string
		want bool
	}{
		{`{"key":"plain"}`, true},
		{`{"key":"Espa\u00f1a and \uFFFD as written"}`, true},
		{"{\"key\":\"Espa\xc3\xb1a\"}", true},
		{`{"key":"\ud83d\ude00"}`, true},   // a surrogate pair
		{`{"key":"\\ud800"}`, true},        // an escaped backslash, then text
		{"{\"key\":\"Espa\xf1a\"}", false}, // not UTF-8
		{`{"key":"\ud800"}`, false},        // a high surrogate alone
		{`{"key":"\ud800\u0041"}`, false},  // a high surrogate before a letter
		{`{"key":"\udc00"}`, false},        // a low surrogate alone
		{`{"key":"\\\udc00"}`, false},      // an escaped backslash, then a lone low surrogate
		{`{"key":"\ud83d"}`, false},        // at the end
	} {
		if got := unicodeText([]byte(tc.body)); got != tc.want {
			t.Errorf("unicodeText(%s) = %v, want %v", tc.body, got, tc.want)
		}
		var v struct{ Key string }
		if err := json.Unmarshal([]byte(tc.body), &v); err != nil {
			t.Fatalf("%s: %v", tc.body, err)
		}
		if replaced := strings.Count(v.Key, "\uFFFD") > strings.Count(tc.body, "\uFFFD")+strings.Count(strings.ToLower(tc.body), `\ufffd`); replaced == tc.want {
			t.Errorf("%s: encoding/json replaced something: %v, but unicodeText says %v", tc.body, replaced, tc.want)
		}
	}
}

// TestDecodeLenientPresence: decodeLenient keeps each field's presence, proto3 optional
// ones too: an empty string sent for an optional field is present, one sent for a plain
// field is not, and either may hold any bytes.
func TestDecodeLenientPresence(t *testing.T) {
	fdp := new(descriptorpb.FileDescriptorProto)
	if err := prototext.Unmarshal([]byte(`name: "lenient_test.proto" syntax: "proto3"
		package: "lenienttest" message_type { name: "M"
		field { name: "opt" number: 1 label: LABEL_OPTIONAL type: TYPE_STRING
			proto3_optional: true oneof_index: 0 }
		field { name: "plain" number: 2 label: LABEL_OPTIONAL type: TYPE_STRING }
		oneof_decl { name: "_opt" } }`), fdp); err != nil {
		t.Fatal(err)
	}
	fd, err := protodesc.NewFile(fdp, nil)
	if err != nil {
		t.Fatal(err)
	}
	md := fd.Messages().Get(0)
	opt, plain := md.Fields().ByNumber(1), md.Fields().ByNumber(2)
	for _, tc := range []struct {
		opt, plain string
		hasOpt     bool
	}{{"", "", true}, {"\xff", "", true}, {"", "\xf1a", true}, {"a", "\xc3(", true}} {
		var b []byte
		b = protowire.AppendString(protowire.AppendTag(b, 1, protowire.BytesType), tc.opt)
		b = protowire.AppendString(protowire.AppendTag(b, 2, protowire.BytesType), tc.plain)
		m := dynamicpb.NewMessage(md)
		if err := decodeLenient(b, m); err != nil {
			t.Fatalf("%q: %v", b, err)
		}
		if m.Has(opt) != tc.hasOpt || m.Has(plain) != (tc.plain != "") ||
			m.Get(opt).String() != tc.opt || m.Get(plain).String() != tc.plain {
			t.Errorf("%q: decoded %v", b, m)
		}
	}
	b := protowire.AppendString(protowire.AppendTag(nil, 2, protowire.BytesType), "")
	if m := dynamicpb.NewMessage(md); decodeLenient(b, m) != nil || m.Has(opt) || m.Has(plain) {
		t.Errorf("%q: decoded %v", b, m)
	}
}
