"""Protobuf messages of the Schema Registry tests, as `protoc --python_out` would make them of

    syntax = "proto3";
    package shop;
    message Order    { int32 id = 1; string customer = 2; int32 qty = 3; double price = 4; int64 at = 5; }
    message Total    { string customer = 1; int32 orders = 2; double amount = 3; }
    message Customer { string tier = 1; }
    message Tiered   { int32 id = 1; string tier = 2; double amount = 3; }

(the descriptor is built here rather than generated: no protoc on the machines the suite runs on). A job
that uses them imports this module by name, as it would a generated one (`eos run` from the directory
holding it: Spark's local Python workers import from there too).
"""

from google.protobuf import descriptor_pb2, descriptor_pool
from google.protobuf.internal import builder

_F = descriptor_pb2.FieldDescriptorProto
_MESSAGES = {
    "Order": [("id", _F.TYPE_INT32), ("customer", _F.TYPE_STRING), ("qty", _F.TYPE_INT32),
              ("price", _F.TYPE_DOUBLE), ("at", _F.TYPE_INT64)],
    "Total": [("customer", _F.TYPE_STRING), ("orders", _F.TYPE_INT32), ("amount", _F.TYPE_DOUBLE)],
    "Customer": [("tier", _F.TYPE_STRING)],
    "Tiered": [("id", _F.TYPE_INT32), ("tier", _F.TYPE_STRING), ("amount", _F.TYPE_DOUBLE)],
}


def _file() -> descriptor_pb2.FileDescriptorProto:
    proto = descriptor_pb2.FileDescriptorProto(name="shop/shop.proto", package="shop", syntax="proto3")
    for name, fields in _MESSAGES.items():
        message = proto.message_type.add(name=name)
        for number, (field, kind) in enumerate(fields, start=1):
            message.field.add(name=field, number=number, type=kind, label=_F.LABEL_OPTIONAL)
    return proto


DESCRIPTOR = descriptor_pool.Default().AddSerializedFile(_file().SerializeToString())
builder.BuildMessageAndEnumDescriptors(DESCRIPTOR, globals())
builder.BuildTopDescriptorsAndMessages(DESCRIPTOR, __name__, globals())
Order = globals()["Order"]
Total = globals()["Total"]
Customer = globals()["Customer"]
Tiered = globals()["Tiered"]
