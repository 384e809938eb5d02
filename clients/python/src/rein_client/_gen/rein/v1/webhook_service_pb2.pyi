from rein_client._gen.buf.validate import validate_pb2 as _validate_pb2
from google.protobuf import timestamp_pb2 as _timestamp_pb2
from rein_client._gen.rein.v1 import run_pb2 as _run_pb2
from google.protobuf.internal import containers as _containers
from google.protobuf.internal import enum_type_wrapper as _enum_type_wrapper
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from typing import ClassVar as _ClassVar, Iterable as _Iterable, Mapping as _Mapping, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor
WEBHOOK_DELIVERY_STATE_FAILED: WebhookDeliveryState
WEBHOOK_DELIVERY_STATE_PENDING: WebhookDeliveryState
WEBHOOK_DELIVERY_STATE_UNSPECIFIED: WebhookDeliveryState
WEBHOOK_FORMAT_SLACK: WebhookFormat
WEBHOOK_FORMAT_STANDARD: WebhookFormat
WEBHOOK_FORMAT_TEAMS: WebhookFormat
WEBHOOK_FORMAT_UNSPECIFIED: WebhookFormat

class CreateWebhookRequest(_message.Message):
    __slots__ = ["webhook"]
    WEBHOOK_FIELD_NUMBER: _ClassVar[int]
    webhook: Webhook
    def __init__(self, webhook: _Optional[_Union[Webhook, _Mapping]] = ...) -> None: ...

class CreateWebhookResponse(_message.Message):
    __slots__ = ["webhook"]
    WEBHOOK_FIELD_NUMBER: _ClassVar[int]
    webhook: Webhook
    def __init__(self, webhook: _Optional[_Union[Webhook, _Mapping]] = ...) -> None: ...

class DeleteWebhookRequest(_message.Message):
    __slots__ = ["name"]
    NAME_FIELD_NUMBER: _ClassVar[int]
    name: str
    def __init__(self, name: _Optional[str] = ...) -> None: ...

class DeleteWebhookResponse(_message.Message):
    __slots__ = []
    def __init__(self) -> None: ...

class GetWebhookRequest(_message.Message):
    __slots__ = ["name"]
    NAME_FIELD_NUMBER: _ClassVar[int]
    name: str
    def __init__(self, name: _Optional[str] = ...) -> None: ...

class GetWebhookResponse(_message.Message):
    __slots__ = ["failed", "pending", "webhook"]
    FAILED_FIELD_NUMBER: _ClassVar[int]
    PENDING_FIELD_NUMBER: _ClassVar[int]
    WEBHOOK_FIELD_NUMBER: _ClassVar[int]
    failed: int
    pending: int
    webhook: Webhook
    def __init__(self, webhook: _Optional[_Union[Webhook, _Mapping]] = ..., pending: _Optional[int] = ..., failed: _Optional[int] = ...) -> None: ...

class ListWebhookDeliveriesRequest(_message.Message):
    __slots__ = ["failed", "limit", "name"]
    FAILED_FIELD_NUMBER: _ClassVar[int]
    LIMIT_FIELD_NUMBER: _ClassVar[int]
    NAME_FIELD_NUMBER: _ClassVar[int]
    failed: bool
    limit: int
    name: str
    def __init__(self, name: _Optional[str] = ..., failed: bool = ..., limit: _Optional[int] = ...) -> None: ...

class ListWebhookDeliveriesResponse(_message.Message):
    __slots__ = ["deliveries"]
    DELIVERIES_FIELD_NUMBER: _ClassVar[int]
    deliveries: _containers.RepeatedCompositeFieldContainer[WebhookDelivery]
    def __init__(self, deliveries: _Optional[_Iterable[_Union[WebhookDelivery, _Mapping]]] = ...) -> None: ...

class ListWebhooksRequest(_message.Message):
    __slots__ = []
    def __init__(self) -> None: ...

class ListWebhooksResponse(_message.Message):
    __slots__ = ["webhooks"]
    WEBHOOKS_FIELD_NUMBER: _ClassVar[int]
    webhooks: _containers.RepeatedCompositeFieldContainer[Webhook]
    def __init__(self, webhooks: _Optional[_Iterable[_Union[Webhook, _Mapping]]] = ...) -> None: ...

class PauseWebhookRequest(_message.Message):
    __slots__ = ["name"]
    NAME_FIELD_NUMBER: _ClassVar[int]
    name: str
    def __init__(self, name: _Optional[str] = ...) -> None: ...

class PauseWebhookResponse(_message.Message):
    __slots__ = ["webhook"]
    WEBHOOK_FIELD_NUMBER: _ClassVar[int]
    webhook: Webhook
    def __init__(self, webhook: _Optional[_Union[Webhook, _Mapping]] = ...) -> None: ...

class RedeliverWebhookRequest(_message.Message):
    __slots__ = ["delivery_id", "failed", "name"]
    DELIVERY_ID_FIELD_NUMBER: _ClassVar[int]
    FAILED_FIELD_NUMBER: _ClassVar[int]
    NAME_FIELD_NUMBER: _ClassVar[int]
    delivery_id: str
    failed: bool
    name: str
    def __init__(self, name: _Optional[str] = ..., delivery_id: _Optional[str] = ..., failed: bool = ...) -> None: ...

class RedeliverWebhookResponse(_message.Message):
    __slots__ = ["queued"]
    QUEUED_FIELD_NUMBER: _ClassVar[int]
    queued: int
    def __init__(self, queued: _Optional[int] = ...) -> None: ...

class ResumeWebhookRequest(_message.Message):
    __slots__ = ["name"]
    NAME_FIELD_NUMBER: _ClassVar[int]
    name: str
    def __init__(self, name: _Optional[str] = ...) -> None: ...

class ResumeWebhookResponse(_message.Message):
    __slots__ = ["webhook"]
    WEBHOOK_FIELD_NUMBER: _ClassVar[int]
    webhook: Webhook
    def __init__(self, webhook: _Optional[_Union[Webhook, _Mapping]] = ...) -> None: ...

class TestWebhookRequest(_message.Message):
    __slots__ = ["name"]
    NAME_FIELD_NUMBER: _ClassVar[int]
    name: str
    def __init__(self, name: _Optional[str] = ...) -> None: ...

class TestWebhookResponse(_message.Message):
    __slots__ = ["error", "id", "status_code"]
    ERROR_FIELD_NUMBER: _ClassVar[int]
    ID_FIELD_NUMBER: _ClassVar[int]
    STATUS_CODE_FIELD_NUMBER: _ClassVar[int]
    error: str
    id: str
    status_code: int
    def __init__(self, id: _Optional[str] = ..., status_code: _Optional[int] = ..., error: _Optional[str] = ...) -> None: ...

class Webhook(_message.Message):
    __slots__ = ["created_at", "created_by", "event_kinds", "format", "labels", "name", "paused", "paused_reason", "secret_fingerprints", "secrets", "statuses", "tenant", "url"]
    class LabelsEntry(_message.Message):
        __slots__ = ["key", "value"]
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: str
        def __init__(self, key: _Optional[str] = ..., value: _Optional[str] = ...) -> None: ...
    CREATED_AT_FIELD_NUMBER: _ClassVar[int]
    CREATED_BY_FIELD_NUMBER: _ClassVar[int]
    EVENT_KINDS_FIELD_NUMBER: _ClassVar[int]
    FORMAT_FIELD_NUMBER: _ClassVar[int]
    LABELS_FIELD_NUMBER: _ClassVar[int]
    NAME_FIELD_NUMBER: _ClassVar[int]
    PAUSED_FIELD_NUMBER: _ClassVar[int]
    PAUSED_REASON_FIELD_NUMBER: _ClassVar[int]
    SECRETS_FIELD_NUMBER: _ClassVar[int]
    SECRET_FINGERPRINTS_FIELD_NUMBER: _ClassVar[int]
    STATUSES_FIELD_NUMBER: _ClassVar[int]
    TENANT_FIELD_NUMBER: _ClassVar[int]
    URL_FIELD_NUMBER: _ClassVar[int]
    created_at: _timestamp_pb2.Timestamp
    created_by: str
    event_kinds: _containers.RepeatedScalarFieldContainer[str]
    format: WebhookFormat
    labels: _containers.ScalarMap[str, str]
    name: str
    paused: bool
    paused_reason: str
    secret_fingerprints: _containers.RepeatedScalarFieldContainer[str]
    secrets: _containers.RepeatedScalarFieldContainer[str]
    statuses: _containers.RepeatedScalarFieldContainer[_run_pb2.RunStatus]
    tenant: str
    url: str
    def __init__(self, name: _Optional[str] = ..., tenant: _Optional[str] = ..., url: _Optional[str] = ..., event_kinds: _Optional[_Iterable[str]] = ..., statuses: _Optional[_Iterable[_Union[_run_pb2.RunStatus, str]]] = ..., labels: _Optional[_Mapping[str, str]] = ..., format: _Optional[_Union[WebhookFormat, str]] = ..., secrets: _Optional[_Iterable[str]] = ..., secret_fingerprints: _Optional[_Iterable[str]] = ..., paused: bool = ..., paused_reason: _Optional[str] = ..., created_by: _Optional[str] = ..., created_at: _Optional[_Union[_timestamp_pb2.Timestamp, _Mapping]] = ...) -> None: ...

class WebhookDelivery(_message.Message):
    __slots__ = ["attempts", "body", "created_at", "first_attempt_at", "id", "last_attempt_at", "last_error", "last_status_code", "next_attempt_at", "run_id", "sequence", "state", "tenant", "type", "webhook"]
    ATTEMPTS_FIELD_NUMBER: _ClassVar[int]
    BODY_FIELD_NUMBER: _ClassVar[int]
    CREATED_AT_FIELD_NUMBER: _ClassVar[int]
    FIRST_ATTEMPT_AT_FIELD_NUMBER: _ClassVar[int]
    ID_FIELD_NUMBER: _ClassVar[int]
    LAST_ATTEMPT_AT_FIELD_NUMBER: _ClassVar[int]
    LAST_ERROR_FIELD_NUMBER: _ClassVar[int]
    LAST_STATUS_CODE_FIELD_NUMBER: _ClassVar[int]
    NEXT_ATTEMPT_AT_FIELD_NUMBER: _ClassVar[int]
    RUN_ID_FIELD_NUMBER: _ClassVar[int]
    SEQUENCE_FIELD_NUMBER: _ClassVar[int]
    STATE_FIELD_NUMBER: _ClassVar[int]
    TENANT_FIELD_NUMBER: _ClassVar[int]
    TYPE_FIELD_NUMBER: _ClassVar[int]
    WEBHOOK_FIELD_NUMBER: _ClassVar[int]
    attempts: int
    body: bytes
    created_at: _timestamp_pb2.Timestamp
    first_attempt_at: _timestamp_pb2.Timestamp
    id: str
    last_attempt_at: _timestamp_pb2.Timestamp
    last_error: str
    last_status_code: int
    next_attempt_at: _timestamp_pb2.Timestamp
    run_id: str
    sequence: int
    state: WebhookDeliveryState
    tenant: str
    type: str
    webhook: str
    def __init__(self, id: _Optional[str] = ..., webhook: _Optional[str] = ..., run_id: _Optional[str] = ..., sequence: _Optional[int] = ..., type: _Optional[str] = ..., state: _Optional[_Union[WebhookDeliveryState, str]] = ..., attempts: _Optional[int] = ..., created_at: _Optional[_Union[_timestamp_pb2.Timestamp, _Mapping]] = ..., next_attempt_at: _Optional[_Union[_timestamp_pb2.Timestamp, _Mapping]] = ..., last_attempt_at: _Optional[_Union[_timestamp_pb2.Timestamp, _Mapping]] = ..., last_status_code: _Optional[int] = ..., last_error: _Optional[str] = ..., body: _Optional[bytes] = ..., tenant: _Optional[str] = ..., first_attempt_at: _Optional[_Union[_timestamp_pb2.Timestamp, _Mapping]] = ...) -> None: ...

class WebhookFormat(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = []

class WebhookDeliveryState(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = []
