package server

import (
	"cmp"
	"fmt"
	"sync"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protodesc"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/types/descriptorpb"
	"google.golang.org/protobuf/types/dynamicpb"
)

// decodeLenient decodes b into m as proto.Unmarshal does, except that a string may hold
// any bytes (see rlsCodec). It decodes b as m's twin (see twinOf), then copies the twin
// into m.
func decodeLenient(b []byte, m proto.Message) error {
	dst := m.ProtoReflect()
	md, err := twinOf(dst.Descriptor())
	if err != nil {
		return err
	}
	twin := dynamicpb.NewMessage(md)
	if err := proto.Unmarshal(b, twin); err != nil {
		return err
	}
	proto.Reset(m)
	copyTwin(dst, twin)
	return nil
}

var twins sync.Map // protoreflect.FullName -> func() (protoreflect.MessageDescriptor, error)

// twinOf returns the twin of md, built once: md in a copy of its file and of the files
// that file imports, where every proto3 file is an editions file with utf8_validation
// NONE. A twin's fields all have explicit presence: it holds each value the wire set.
func twinOf(md protoreflect.MessageDescriptor) (protoreflect.MessageDescriptor, error) {
	build, _ := twins.LoadOrStore(md.FullName(),
		sync.OnceValues(func() (protoreflect.MessageDescriptor, error) { return buildTwin(md) }))
	return build.(func() (protoreflect.MessageDescriptor, error))()
}

func buildTwin(md protoreflect.MessageDescriptor) (protoreflect.MessageDescriptor, error) {
	set, seen := new(descriptorpb.FileDescriptorSet), map[string]bool{}
	var add func(fd protoreflect.FileDescriptor)
	add = func(fd protoreflect.FileDescriptor) {
		if seen[fd.Path()] {
			return
		}
		seen[fd.Path()] = true
		imports := fd.Imports()
		for i := range imports.Len() {
			add(imports.Get(i).FileDescriptor)
		}
		fdp := protodesc.ToFileDescriptorProto(fd)
		if fd.Syntax() == protoreflect.Proto3 {
			fdp.Syntax = proto.String("editions")
			fdp.Edition = descriptorpb.Edition_EDITION_2023.Enum()
			fdp.Options = cmp.Or(fdp.Options, new(descriptorpb.FileOptions))
			none := descriptorpb.FeatureSet_NONE
			fdp.Options.Features = &descriptorpb.FeatureSet{Utf8Validation: &none}
			for _, m := range fdp.MessageType {
				noProto3Optional(m)
			}
		}
		set.File = append(set.File, fdp)
	}
	add(md.ParentFile())
	files, err := protodesc.NewFiles(set)
	var d protoreflect.Descriptor
	if err == nil {
		d, err = files.FindDescriptorByName(md.FullName())
	}
	if err != nil {
		return nil, fmt.Errorf("the twin of %s: %w", md.FullName(), err)
	}
	return d.(protoreflect.MessageDescriptor), nil
}

// noProto3Optional clears proto3_optional, which an editions file cannot declare, in m
// and its nested messages: each such field keeps its oneof of one field.
func noProto3Optional(m *descriptorpb.DescriptorProto) {
	for _, f := range m.Field {
		f.Proto3Optional = nil
	}
	for _, n := range m.NestedType {
		noProto3Optional(n)
	}
}

// copyTwin copies src, a twin, into dst, the message it mirrors, by field number.
func copyTwin(dst, src protoreflect.Message) {
	fields := dst.Descriptor().Fields()
	src.Range(func(sf protoreflect.FieldDescriptor, v protoreflect.Value) bool {
		df := fields.ByNumber(sf.Number())
		switch {
		case df.IsMap():
			to := dst.Mutable(df).Map()
			v.Map().Range(func(k protoreflect.MapKey, v protoreflect.Value) bool {
				to.Set(k, twinValue(v, to.NewValue))
				return true
			})
		case df.IsList():
			from, to := v.List(), dst.Mutable(df).List()
			for i := range from.Len() {
				to.Append(twinValue(from.Get(i), to.NewElement))
			}
		case df.Message() != nil:
			copyTwin(dst.Mutable(df).Message(), v.Message())
		default:
			dst.Set(df, v)
		}
		return true
	})
	dst.SetUnknown(src.GetUnknown())
}

// twinValue is v, a twin's list element or map value: for a message, a copy into the one
// newMsg makes; else v itself.
func twinValue(v protoreflect.Value, newMsg func() protoreflect.Value) protoreflect.Value {
	m, ok := v.Interface().(protoreflect.Message)
	if !ok {
		return v
	}
	c := newMsg()
	copyTwin(c.Message(), m)
	return c
}
