from rein_client._gen.buf.validate import validate_pb2 as _validate_pb2
from google.protobuf import struct_pb2 as _struct_pb2
from rein_client._gen.rein.v1 import contract_pb2 as _contract_pb2
from google.protobuf.internal import containers as _containers
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from typing import ClassVar as _ClassVar, Iterable as _Iterable, Mapping as _Mapping, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class CommitWriteRequest(_message.Message):
    __slots__ = ["call", "operation_id", "preview"]
    CALL_FIELD_NUMBER: _ClassVar[int]
    OPERATION_ID_FIELD_NUMBER: _ClassVar[int]
    PREVIEW_FIELD_NUMBER: _ClassVar[int]
    call: RemoteToolCall
    operation_id: str
    preview: _struct_pb2.Value
    def __init__(self, call: _Optional[_Union[RemoteToolCall, _Mapping]] = ..., operation_id: _Optional[str] = ..., preview: _Optional[_Union[_struct_pb2.Value, _Mapping]] = ...) -> None: ...

class CommitWriteResponse(_message.Message):
    __slots__ = ["receipt"]
    RECEIPT_FIELD_NUMBER: _ClassVar[int]
    receipt: _struct_pb2.Value
    def __init__(self, receipt: _Optional[_Union[_struct_pb2.Value, _Mapping]] = ...) -> None: ...

class ListToolsRequest(_message.Message):
    __slots__ = []
    def __init__(self) -> None: ...

class ListToolsResponse(_message.Message):
    __slots__ = ["tools"]
    TOOLS_FIELD_NUMBER: _ClassVar[int]
    tools: _containers.RepeatedCompositeFieldContainer[ToolSpec]
    def __init__(self, tools: _Optional[_Iterable[_Union[ToolSpec, _Mapping]]] = ...) -> None: ...

class LookupWriteRequest(_message.Message):
    __slots__ = ["call", "operation_id"]
    CALL_FIELD_NUMBER: _ClassVar[int]
    OPERATION_ID_FIELD_NUMBER: _ClassVar[int]
    call: RemoteToolCall
    operation_id: str
    def __init__(self, call: _Optional[_Union[RemoteToolCall, _Mapping]] = ..., operation_id: _Optional[str] = ...) -> None: ...

class LookupWriteResponse(_message.Message):
    __slots__ = ["applied", "receipt"]
    APPLIED_FIELD_NUMBER: _ClassVar[int]
    RECEIPT_FIELD_NUMBER: _ClassVar[int]
    applied: bool
    receipt: _struct_pb2.Value
    def __init__(self, applied: bool = ..., receipt: _Optional[_Union[_struct_pb2.Value, _Mapping]] = ...) -> None: ...

class ProposeWriteRequest(_message.Message):
    __slots__ = ["call"]
    CALL_FIELD_NUMBER: _ClassVar[int]
    call: RemoteToolCall
    def __init__(self, call: _Optional[_Union[RemoteToolCall, _Mapping]] = ...) -> None: ...

class ProposeWriteResponse(_message.Message):
    __slots__ = ["preview"]
    PREVIEW_FIELD_NUMBER: _ClassVar[int]
    preview: _struct_pb2.Value
    def __init__(self, preview: _Optional[_Union[_struct_pb2.Value, _Mapping]] = ...) -> None: ...

class ReadRequest(_message.Message):
    __slots__ = ["call"]
    CALL_FIELD_NUMBER: _ClassVar[int]
    call: RemoteToolCall
    def __init__(self, call: _Optional[_Union[RemoteToolCall, _Mapping]] = ...) -> None: ...

class ReadResponse(_message.Message):
    __slots__ = ["output"]
    OUTPUT_FIELD_NUMBER: _ClassVar[int]
    output: _struct_pb2.Value
    def __init__(self, output: _Optional[_Union[_struct_pb2.Value, _Mapping]] = ...) -> None: ...

class RemoteToolCall(_message.Message):
    __slots__ = ["arguments", "call_id", "run_id", "tool"]
    ARGUMENTS_FIELD_NUMBER: _ClassVar[int]
    CALL_ID_FIELD_NUMBER: _ClassVar[int]
    RUN_ID_FIELD_NUMBER: _ClassVar[int]
    TOOL_FIELD_NUMBER: _ClassVar[int]
    arguments: _struct_pb2.Struct
    call_id: str
    run_id: str
    tool: str
    def __init__(self, run_id: _Optional[str] = ..., call_id: _Optional[str] = ..., tool: _Optional[str] = ..., arguments: _Optional[_Union[_struct_pb2.Struct, _Mapping]] = ...) -> None: ...

class ToolSpec(_message.Message):
    __slots__ = ["description", "input_schema", "name", "tier"]
    DESCRIPTION_FIELD_NUMBER: _ClassVar[int]
    INPUT_SCHEMA_FIELD_NUMBER: _ClassVar[int]
    NAME_FIELD_NUMBER: _ClassVar[int]
    TIER_FIELD_NUMBER: _ClassVar[int]
    description: str
    input_schema: _struct_pb2.Struct
    name: str
    tier: _contract_pb2.ToolTier
    def __init__(self, name: _Optional[str] = ..., description: _Optional[str] = ..., input_schema: _Optional[_Union[_struct_pb2.Struct, _Mapping]] = ..., tier: _Optional[_Union[_contract_pb2.ToolTier, str]] = ...) -> None: ...
