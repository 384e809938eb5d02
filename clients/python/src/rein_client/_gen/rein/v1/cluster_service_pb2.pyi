from google.protobuf import duration_pb2 as _duration_pb2
from google.protobuf import timestamp_pb2 as _timestamp_pb2
from google.protobuf.internal import containers as _containers
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from typing import ClassVar as _ClassVar, Iterable as _Iterable, Mapping as _Mapping, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class ClusterReplica(_message.Message):
    __slots__ = ["build", "card", "error", "formats", "leased", "legacy", "name", "runs_driven", "self"]
    BUILD_FIELD_NUMBER: _ClassVar[int]
    CARD_FIELD_NUMBER: _ClassVar[int]
    ERROR_FIELD_NUMBER: _ClassVar[int]
    FORMATS_FIELD_NUMBER: _ClassVar[int]
    LEASED_FIELD_NUMBER: _ClassVar[int]
    LEGACY_FIELD_NUMBER: _ClassVar[int]
    NAME_FIELD_NUMBER: _ClassVar[int]
    RUNS_DRIVEN_FIELD_NUMBER: _ClassVar[int]
    SELF_FIELD_NUMBER: _ClassVar[int]
    build: str
    card: str
    error: str
    formats: StoreFormats
    leased: _timestamp_pb2.Timestamp
    legacy: bool
    name: str
    runs_driven: int
    self: bool
    def __init__(self, name: _Optional[str] = ..., build: _Optional[str] = ..., card: _Optional[str] = ..., legacy: bool = ..., formats: _Optional[_Union[StoreFormats, _Mapping]] = ..., error: _Optional[str] = ..., runs_driven: _Optional[int] = ..., leased: _Optional[_Union[_timestamp_pb2.Timestamp, _Mapping]] = ..., self: bool = ...) -> None: ...

class FinalizeClusterRequest(_message.Message):
    __slots__ = []
    def __init__(self) -> None: ...

class FinalizeClusterResponse(_message.Message):
    __slots__ = ["from_format", "to_format"]
    FROM_FORMAT_FIELD_NUMBER: _ClassVar[int]
    TO_FORMAT_FIELD_NUMBER: _ClassVar[int]
    from_format: int
    to_format: int
    def __init__(self, from_format: _Optional[int] = ..., to_format: _Optional[int] = ...) -> None: ...

class FormatRange(_message.Message):
    __slots__ = ["max", "min"]
    MAX_FIELD_NUMBER: _ClassVar[int]
    MIN_FIELD_NUMBER: _ClassVar[int]
    max: int
    min: int
    def __init__(self, min: _Optional[int] = ..., max: _Optional[int] = ...) -> None: ...

class GetClusterStatusRequest(_message.Message):
    __slots__ = []
    def __init__(self) -> None: ...

class GetClusterStatusResponse(_message.Message):
    __slots__ = ["active_format", "backend", "blocked", "features_off", "finalization_pending", "finalize_after", "finalized", "pending_since", "replicas", "target_format"]
    ACTIVE_FORMAT_FIELD_NUMBER: _ClassVar[int]
    BACKEND_FIELD_NUMBER: _ClassVar[int]
    BLOCKED_FIELD_NUMBER: _ClassVar[int]
    FEATURES_OFF_FIELD_NUMBER: _ClassVar[int]
    FINALIZATION_PENDING_FIELD_NUMBER: _ClassVar[int]
    FINALIZED_FIELD_NUMBER: _ClassVar[int]
    FINALIZE_AFTER_FIELD_NUMBER: _ClassVar[int]
    PENDING_SINCE_FIELD_NUMBER: _ClassVar[int]
    REPLICAS_FIELD_NUMBER: _ClassVar[int]
    TARGET_FORMAT_FIELD_NUMBER: _ClassVar[int]
    active_format: int
    backend: str
    blocked: str
    features_off: _containers.RepeatedScalarFieldContainer[str]
    finalization_pending: bool
    finalize_after: _duration_pb2.Duration
    finalized: bool
    pending_since: _timestamp_pb2.Timestamp
    replicas: _containers.RepeatedCompositeFieldContainer[ClusterReplica]
    target_format: int
    def __init__(self, backend: _Optional[str] = ..., active_format: _Optional[int] = ..., finalized: bool = ..., target_format: _Optional[int] = ..., finalization_pending: bool = ..., pending_since: _Optional[_Union[_timestamp_pb2.Timestamp, _Mapping]] = ..., finalize_after: _Optional[_Union[_duration_pb2.Duration, _Mapping]] = ..., blocked: _Optional[str] = ..., replicas: _Optional[_Iterable[_Union[ClusterReplica, _Mapping]]] = ..., features_off: _Optional[_Iterable[str]] = ...) -> None: ...

class ServerFormats(_message.Message):
    __slots__ = ["active", "build", "features_off"]
    ACTIVE_FIELD_NUMBER: _ClassVar[int]
    BUILD_FIELD_NUMBER: _ClassVar[int]
    FEATURES_OFF_FIELD_NUMBER: _ClassVar[int]
    active: int
    build: StoreFormats
    features_off: _containers.RepeatedScalarFieldContainer[str]
    def __init__(self, build: _Optional[_Union[StoreFormats, _Mapping]] = ..., active: _Optional[int] = ..., features_off: _Optional[_Iterable[str]] = ...) -> None: ...

class StoreFormats(_message.Message):
    __slots__ = ["reads", "writes"]
    READS_FIELD_NUMBER: _ClassVar[int]
    WRITES_FIELD_NUMBER: _ClassVar[int]
    reads: FormatRange
    writes: FormatRange
    def __init__(self, reads: _Optional[_Union[FormatRange, _Mapping]] = ..., writes: _Optional[_Union[FormatRange, _Mapping]] = ...) -> None: ...
