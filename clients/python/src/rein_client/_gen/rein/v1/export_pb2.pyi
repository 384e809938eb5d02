from google.protobuf import timestamp_pb2 as _timestamp_pb2
from rein_client._gen.rein.v1 import event_pb2 as _event_pb2
from google.protobuf.internal import containers as _containers
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from typing import ClassVar as _ClassVar, Iterable as _Iterable, Mapping as _Mapping, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class RunExport(_message.Message):
    __slots__ = ["blobs", "children", "events", "exported_at", "exported_by", "format_version", "run_id"]
    class BlobsEntry(_message.Message):
        __slots__ = ["key", "value"]
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: bytes
        def __init__(self, key: _Optional[str] = ..., value: _Optional[bytes] = ...) -> None: ...
    BLOBS_FIELD_NUMBER: _ClassVar[int]
    CHILDREN_FIELD_NUMBER: _ClassVar[int]
    EVENTS_FIELD_NUMBER: _ClassVar[int]
    EXPORTED_AT_FIELD_NUMBER: _ClassVar[int]
    EXPORTED_BY_FIELD_NUMBER: _ClassVar[int]
    FORMAT_VERSION_FIELD_NUMBER: _ClassVar[int]
    RUN_ID_FIELD_NUMBER: _ClassVar[int]
    blobs: _containers.ScalarMap[str, bytes]
    children: _containers.RepeatedCompositeFieldContainer[RunExport]
    events: _containers.RepeatedCompositeFieldContainer[_event_pb2.Event]
    exported_at: _timestamp_pb2.Timestamp
    exported_by: str
    format_version: int
    run_id: str
    def __init__(self, format_version: _Optional[int] = ..., run_id: _Optional[str] = ..., events: _Optional[_Iterable[_Union[_event_pb2.Event, _Mapping]]] = ..., blobs: _Optional[_Mapping[str, bytes]] = ..., exported_at: _Optional[_Union[_timestamp_pb2.Timestamp, _Mapping]] = ..., exported_by: _Optional[str] = ..., children: _Optional[_Iterable[_Union[RunExport, _Mapping]]] = ...) -> None: ...
