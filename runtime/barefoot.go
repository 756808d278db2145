package runtime

import (
	"google.golang.org/protobuf/reflect/protodesc"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/reflect/protoregistry"
	"google.golang.org/protobuf/types/descriptorpb"
	"google.golang.org/protobuf/types/dynamicpb"

	p4configv1 "github.com/p4lang/p4runtime/go/p4/config/v1"
)

// barefootTypes resolves the extern descriptions the Tofino back end of
// p4c (p4c-barefoot) writes into its P4Info as Any messages
// (type.googleapis.com/barefoot.Counter, ...): text-format P4Info names
// them in expanded form, which cannot be read without their message types.
// They are described here by field number and type, as the compiler's
// barefoot/p4info.proto defines them, and built as dynamic messages, so a
// P4Info read and pushed again keeps them byte for byte.
var barefootTypes = func() *protoregistry.Types {
	s := descriptorpb.FieldDescriptorProto_TYPE_STRING.Enum()
	i64 := descriptorpb.FieldDescriptorProto_TYPE_INT64.Enum()
	i32 := descriptorpb.FieldDescriptorProto_TYPE_INT32.Enum()
	u32 := descriptorpb.FieldDescriptorProto_TYPE_UINT32.Enum()
	b := descriptorpb.FieldDescriptorProto_TYPE_BOOL.Enum()
	msg := descriptorpb.FieldDescriptorProto_TYPE_MESSAGE.Enum()
	enum := descriptorpb.FieldDescriptorProto_TYPE_ENUM.Enum()
	opt := descriptorpb.FieldDescriptorProto_LABEL_OPTIONAL.Enum()
	rep := descriptorpb.FieldDescriptorProto_LABEL_REPEATED.Enum()
	f := func(name string, num int32, typ *descriptorpb.FieldDescriptorProto_Type, label *descriptorpb.FieldDescriptorProto_Label, typeName string) *descriptorpb.FieldDescriptorProto {
		d := &descriptorpb.FieldDescriptorProto{Name: &name, Number: &num, Type: typ, Label: label, JsonName: &name}
		if typeName != "" {
			d.TypeName = &typeName
		}
		return d
	}
	m := func(name string, fields []*descriptorpb.FieldDescriptorProto, nested ...*descriptorpb.DescriptorProto) *descriptorpb.DescriptorProto {
		return &descriptorpb.DescriptorProto{Name: &name, Field: fields, NestedType: nested}
	}
	e := func(name string, values ...string) *descriptorpb.EnumDescriptorProto {
		d := &descriptorpb.EnumDescriptorProto{Name: &name}
		for n, v := range values {
			num := int32(n)
			d.Value = append(d.Value, &descriptorpb.EnumValueDescriptorProto{Name: &v, Number: &num})
		}
		return d
	}
	const spec = ".p4.config.v1.P4DataTypeSpec"
	counterSpec := m("CounterSpec", []*descriptorpb.FieldDescriptorProto{f("unit", 1, enum, opt, ".barefoot.CounterSpec.Unit")})
	counterSpec.EnumType = []*descriptorpb.EnumDescriptorProto{e("Unit", "UNSPECIFIED", "BYTES", "PACKETS", "PACKETS_AND_BYTES")}
	file := &descriptorpb.FileDescriptorProto{
		Name:       ptr("lbc/barefoot/p4info.proto"),
		Package:    ptr("barefoot"),
		Syntax:     ptr("proto3"),
		Dependency: []string{p4configv1.File_p4_config_v1_p4types_proto.Path()},
		EnumType:   []*descriptorpb.EnumDescriptorProto{e("Direction", "DIRECTION_INGRESS", "DIRECTION_EGRESS")},
		MessageType: []*descriptorpb.DescriptorProto{
			counterSpec,
			m("Counter", []*descriptorpb.FieldDescriptorProto{f("spec", 1, msg, opt, ".barefoot.CounterSpec"), f("size", 2, i64, opt, "")}),
			m("Register", []*descriptorpb.FieldDescriptorProto{f("type_spec", 1, msg, opt, spec), f("size", 2, i64, opt, ""), f("data_field_name", 3, s, opt, "")}),
			m("DynHash", []*descriptorpb.FieldDescriptorProto{f("type_spec", 1, msg, opt, spec), f("field_infos", 2, msg, rep, ".barefoot.DynHash.field_info"), f("hash_width", 3, i32, opt, "")},
				m("field_info", []*descriptorpb.FieldDescriptorProto{f("field_name", 1, s, opt, ""), f("is_constant", 2, b, opt, "")})),
			m("PortMetadata", []*descriptorpb.FieldDescriptorProto{f("key_name", 1, s, opt, ""), f("type_spec", 2, msg, opt, spec)}),
			m("Snapshot", []*descriptorpb.FieldDescriptorProto{f("pipe", 1, s, opt, ""), f("direction", 2, enum, opt, ".barefoot.Direction"), f("fields", 3, msg, rep, ".barefoot.Snapshot.Field")},
				m("Field", []*descriptorpb.FieldDescriptorProto{f("id", 1, u32, opt, ""), f("name", 2, s, opt, ""), f("bitwidth", 3, i32, opt, "")})),
		},
	}
	fd, err := protodesc.NewFile(file, protoregistry.GlobalFiles)
	if err != nil {
		panic("runtime: barefoot P4Info types: " + err.Error()) // a programming error in the table above
	}
	types := new(protoregistry.Types)
	msgs := fd.Messages()
	for i := 0; i < msgs.Len(); i++ {
		if err := types.RegisterMessage(dynamicpb.NewMessageType(msgs.Get(i))); err != nil {
			panic("runtime: barefoot P4Info types: " + err.Error())
		}
	}
	return types
}()

func ptr[T any](v T) *T { return &v }

// p4infoResolver finds the message types an Any in a P4Info may name: the
// linked ones (P4Runtime's), then the Tofino back end's.
type p4infoResolver struct{}

func (p4infoResolver) FindMessageByName(n protoreflect.FullName) (protoreflect.MessageType, error) {
	if t, err := protoregistry.GlobalTypes.FindMessageByName(n); err == nil {
		return t, nil
	}
	return barefootTypes.FindMessageByName(n)
}

func (p4infoResolver) FindMessageByURL(url string) (protoreflect.MessageType, error) {
	if t, err := protoregistry.GlobalTypes.FindMessageByURL(url); err == nil {
		return t, nil
	}
	return barefootTypes.FindMessageByURL(url)
}

func (p4infoResolver) FindExtensionByName(n protoreflect.FullName) (protoreflect.ExtensionType, error) {
	return protoregistry.GlobalTypes.FindExtensionByName(n)
}

func (p4infoResolver) FindExtensionByNumber(m protoreflect.FullName, n protoreflect.FieldNumber) (protoreflect.ExtensionType, error) {
	return protoregistry.GlobalTypes.FindExtensionByNumber(m, n)
}
