from rein_client._gen.buf.validate import validate_pb2 as _validate_pb2
from google.protobuf import struct_pb2 as _struct_pb2
from rein_client._gen.rein.v1 import contract_pb2 as _contract_pb2
from google.protobuf.internal import containers as _containers
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from typing import ClassVar as _ClassVar, Mapping as _Mapping, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class CheckRequest(_message.Message):
    __slots__ = ["args", "call_id", "run", "tool"]
    ARGS_FIELD_NUMBER: _ClassVar[int]
    CALL_ID_FIELD_NUMBER: _ClassVar[int]
    RUN_FIELD_NUMBER: _ClassVar[int]
    TOOL_FIELD_NUMBER: _ClassVar[int]
    args: _struct_pb2.Struct
    call_id: str
    run: PolicyRun
    tool: PolicyTool
    def __init__(self, call_id: _Optional[str] = ..., tool: _Optional[_Union[PolicyTool, _Mapping]] = ..., args: _Optional[_Union[_struct_pb2.Struct, _Mapping]] = ..., run: _Optional[_Union[PolicyRun, _Mapping]] = ...) -> None: ...

class CheckResponse(_message.Message):
    __slots__ = ["approvals", "effect", "reason"]
    APPROVALS_FIELD_NUMBER: _ClassVar[int]
    EFFECT_FIELD_NUMBER: _ClassVar[int]
    REASON_FIELD_NUMBER: _ClassVar[int]
    approvals: int
    effect: _contract_pb2.PolicyEffect
    reason: str
    def __init__(self, effect: _Optional[_Union[_contract_pb2.PolicyEffect, str]] = ..., reason: _Optional[str] = ..., approvals: _Optional[int] = ...) -> None: ...

class PolicyRun(_message.Message):
    __slots__ = ["id", "labels", "parent", "principal", "spent_usd", "step", "tenant", "tokens"]
    class LabelsEntry(_message.Message):
        __slots__ = ["key", "value"]
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: str
        def __init__(self, key: _Optional[str] = ..., value: _Optional[str] = ...) -> None: ...
    ID_FIELD_NUMBER: _ClassVar[int]
    LABELS_FIELD_NUMBER: _ClassVar[int]
    PARENT_FIELD_NUMBER: _ClassVar[int]
    PRINCIPAL_FIELD_NUMBER: _ClassVar[int]
    SPENT_USD_FIELD_NUMBER: _ClassVar[int]
    STEP_FIELD_NUMBER: _ClassVar[int]
    TENANT_FIELD_NUMBER: _ClassVar[int]
    TOKENS_FIELD_NUMBER: _ClassVar[int]
    id: str
    labels: _containers.ScalarMap[str, str]
    parent: str
    principal: str
    spent_usd: float
    step: int
    tenant: str
    tokens: int
    def __init__(self, id: _Optional[str] = ..., spent_usd: _Optional[float] = ..., step: _Optional[int] = ..., tokens: _Optional[int] = ..., principal: _Optional[str] = ..., tenant: _Optional[str] = ..., labels: _Optional[_Mapping[str, str]] = ..., parent: _Optional[str] = ...) -> None: ...

class PolicyTool(_message.Message):
    __slots__ = ["name", "tier"]
    NAME_FIELD_NUMBER: _ClassVar[int]
    TIER_FIELD_NUMBER: _ClassVar[int]
    name: str
    tier: str
    def __init__(self, name: _Optional[str] = ..., tier: _Optional[str] = ...) -> None: ...
