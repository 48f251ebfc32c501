package server

import (
	"fmt"
	"sync"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protodesc"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/reflect/protoregistry"
	"google.golang.org/protobuf/types/descriptorpb"
	"google.golang.org/protobuf/types/dynamicpb"
)

// decodeLenient decodes b into m as proto.Unmarshal does, except that a string may hold
// any bytes (see rlsCodec). It decodes b as m's twin, whose string fields are bytes
// fields (the same wire format without the UTF-8 check), then copies the twin into m.
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

var twins sync.Map // protoreflect.FullName -> twinResult

type twinResult struct {
	md  protoreflect.MessageDescriptor
	err error
}

// twinOf returns the twin of md, built once: the files of every message reachable from
// md, rebuilt with every string field made bytes and every map a repeated field of its
// entries (a map key cannot be bytes).
func twinOf(md protoreflect.MessageDescriptor) (protoreflect.MessageDescriptor, error) {
	if t, ok := twins.Load(md.FullName()); ok {
		return t.(twinResult).md, t.(twinResult).err
	}
	t := buildTwin(md)
	twins.Store(md.FullName(), t)
	return t.md, t.err
}

func buildTwin(md protoreflect.MessageDescriptor) twinResult {
	// The files to twin: those of the messages reachable from md.
	r := twinResolver{local: new(protoregistry.Files), todo: map[string]protoreflect.FileDescriptor{}}
	msgs := map[protoreflect.FullName]bool{}
	var visit func(m protoreflect.MessageDescriptor)
	visit = func(m protoreflect.MessageDescriptor) {
		if msgs[m.FullName()] {
			return
		}
		msgs[m.FullName()] = true
		r.todo[m.ParentFile().Path()] = m.ParentFile()
		fields := m.Fields()
		for i := range fields.Len() {
			if f := fields.Get(i); f.Message() != nil {
				visit(f.Message())
			}
		}
	}
	visit(md)
	if _, err := r.FindFileByPath(md.ParentFile().Path()); err != nil {
		return twinResult{err: err}
	}
	d, err := r.local.FindDescriptorByName(md.FullName())
	if err != nil {
		return twinResult{err: fmt.Errorf("the bytes twin of %s: %w", md.FullName(), err)}
	}
	return twinResult{md: d.(protoreflect.MessageDescriptor)}
}

// stringsToBytes makes every string field of m and its nested messages bytes, and every
// map entry a plain message.
func stringsToBytes(m *descriptorpb.DescriptorProto) {
	for _, f := range m.Field {
		if f.GetType() == descriptorpb.FieldDescriptorProto_TYPE_STRING {
			f.Type = descriptorpb.FieldDescriptorProto_TYPE_BYTES.Enum()
		}
	}
	if m.GetOptions().GetMapEntry() {
		m.Options.MapEntry = nil
	}
	for _, n := range m.NestedType {
		stringsToBytes(n)
	}
}

// twinResolver resolves the twin files, building each file of todo (and so first its
// imports) when first asked for, then every other file as the program registered it.
type twinResolver struct {
	local *protoregistry.Files
	todo  map[string]protoreflect.FileDescriptor
}

func (r twinResolver) FindFileByPath(path string) (protoreflect.FileDescriptor, error) {
	if fd, err := r.local.FindFileByPath(path); err == nil {
		return fd, nil
	}
	fd, ok := r.todo[path]
	if !ok {
		return protoregistry.GlobalFiles.FindFileByPath(path)
	}
	fdp := protodesc.ToFileDescriptorProto(fd)
	for _, m := range fdp.MessageType {
		stringsToBytes(m)
	}
	twin, err := protodesc.NewFile(fdp, r)
	if err == nil {
		err = r.local.RegisterFile(twin)
	}
	if err != nil {
		return nil, fmt.Errorf("the bytes twin of %s: %w", path, err)
	}
	return twin, nil
}

func (r twinResolver) FindDescriptorByName(name protoreflect.FullName) (protoreflect.Descriptor, error) {
	if d, err := r.local.FindDescriptorByName(name); err == nil {
		return d, nil
	}
	return protoregistry.GlobalFiles.FindDescriptorByName(name)
}

// copyTwin copies src, a twin, into dst, the message it mirrors, by field number.
func copyTwin(dst, src protoreflect.Message) {
	fields := dst.Descriptor().Fields()
	src.Range(func(sf protoreflect.FieldDescriptor, v protoreflect.Value) bool {
		df := fields.ByNumber(sf.Number())
		switch {
		case df.IsMap():
			entries, to := v.List(), dst.Mutable(df).Map()
			for i := range entries.Len() {
				e := entries.Get(i).Message()
				ef := e.Descriptor().Fields()
				k := twinValue(df.MapKey(), e.Get(ef.ByNumber(1)), nil).MapKey()
				to.Set(k, twinValue(df.MapValue(), e.Get(ef.ByNumber(2)), to.NewValue))
			}
		case df.IsList():
			from, to := v.List(), dst.Mutable(df).List()
			for i := range from.Len() {
				to.Append(twinValue(df, from.Get(i), to.NewElement))
			}
		case df.Message() != nil:
			copyTwin(dst.Mutable(df).Message(), v.Message())
		default:
			dst.Set(df, twinValue(df, v, nil))
		}
		return true
	})
	if u := src.GetUnknown(); len(u) > 0 {
		dst.SetUnknown(u)
	}
}

// twinValue is v, a twin's value, as a value of field f: a string for a string, and for a
// message a copy into one newMsg makes.
func twinValue(f protoreflect.FieldDescriptor, v protoreflect.Value,
	newMsg func() protoreflect.Value) protoreflect.Value {
	switch {
	case f.Message() != nil:
		m := newMsg()
		copyTwin(m.Message(), v.Message())
		return m
	case f.Kind() == protoreflect.StringKind:
		return protoreflect.ValueOfString(string(v.Bytes()))
	}
	return v
}
