package server

import (
	"google.golang.org/grpc/encoding"
	grpcproto "google.golang.org/grpc/encoding/proto"
	"google.golang.org/grpc/mem"
	"google.golang.org/protobuf/proto"
)

// rlsCodec is the gRPC server's codec: gRPC's proto codec, except that a message the
// proto codec refuses to decode is decoded again by [decodeLenient], which lets a string
// hold any bytes. Envoy forwards header bytes as they came, and each string is decided as
// its bytes, never refused (an error Envoy would fail open on).
type rlsCodec struct{ encoding.CodecV2 }

func newRLSCodec() rlsCodec { return rlsCodec{encoding.GetCodecV2(grpcproto.Name)} }

// Unmarshal decodes data into v.
func (c rlsCodec) Unmarshal(data mem.BufferSlice, v any) error {
	err := c.CodecV2.Unmarshal(data, v)
	if m, ok := v.(proto.Message); ok && err != nil && decodeLenient(data.Materialize(), m) == nil {
		return nil
	}
	return err
}
