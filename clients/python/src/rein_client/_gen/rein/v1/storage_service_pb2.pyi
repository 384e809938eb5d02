from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from typing import ClassVar as _ClassVar, Optional as _Optional

DESCRIPTOR: _descriptor.FileDescriptor

class BackupRequest(_message.Message):
    __slots__ = []
    def __init__(self) -> None: ...

class BackupResponse(_message.Message):
    __slots__ = ["chunk", "size"]
    CHUNK_FIELD_NUMBER: _ClassVar[int]
    SIZE_FIELD_NUMBER: _ClassVar[int]
    chunk: bytes
    size: int
    def __init__(self, chunk: _Optional[bytes] = ..., size: _Optional[int] = ...) -> None: ...
