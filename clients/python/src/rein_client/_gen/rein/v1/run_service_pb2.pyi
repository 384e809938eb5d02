from rein_client._gen.buf.validate import validate_pb2 as _validate_pb2
from google.protobuf import duration_pb2 as _duration_pb2
from google.protobuf import struct_pb2 as _struct_pb2
from google.protobuf import timestamp_pb2 as _timestamp_pb2
from rein_client._gen.rein.v1 import cluster_service_pb2 as _cluster_service_pb2
from rein_client._gen.rein.v1 import contract_pb2 as _contract_pb2
from rein_client._gen.rein.v1 import event_pb2 as _event_pb2
from rein_client._gen.rein.v1 import export_pb2 as _export_pb2
from rein_client._gen.rein.v1 import run_pb2 as _run_pb2
from google.protobuf.internal import containers as _containers
from google.protobuf.internal import enum_type_wrapper as _enum_type_wrapper
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from typing import ClassVar as _ClassVar, Iterable as _Iterable, Mapping as _Mapping, Optional as _Optional, Union as _Union

APPROVAL_VERDICT_APPROVE: ApprovalVerdict
APPROVAL_VERDICT_REJECT: ApprovalVerdict
APPROVAL_VERDICT_REVISE: ApprovalVerdict
APPROVAL_VERDICT_UNSPECIFIED: ApprovalVerdict
DESCRIPTOR: _descriptor.FileDescriptor
SCHEDULE_CATCH_UP_NONE: ScheduleCatchUp
SCHEDULE_CATCH_UP_ONE: ScheduleCatchUp
SCHEDULE_CATCH_UP_UNSPECIFIED: ScheduleCatchUp
SCHEDULE_OVERLAP_ALLOW: ScheduleOverlap
SCHEDULE_OVERLAP_SKIP: ScheduleOverlap
SCHEDULE_OVERLAP_UNSPECIFIED: ScheduleOverlap

class BuildInfo(_message.Message):
    __slots__ = ["api_version", "go_version", "modified", "revision", "revision_time", "version"]
    API_VERSION_FIELD_NUMBER: _ClassVar[int]
    GO_VERSION_FIELD_NUMBER: _ClassVar[int]
    MODIFIED_FIELD_NUMBER: _ClassVar[int]
    REVISION_FIELD_NUMBER: _ClassVar[int]
    REVISION_TIME_FIELD_NUMBER: _ClassVar[int]
    VERSION_FIELD_NUMBER: _ClassVar[int]
    api_version: str
    go_version: str
    modified: bool
    revision: str
    revision_time: _timestamp_pb2.Timestamp
    version: str
    def __init__(self, version: _Optional[str] = ..., revision: _Optional[str] = ..., revision_time: _Optional[_Union[_timestamp_pb2.Timestamp, _Mapping]] = ..., modified: bool = ..., go_version: _Optional[str] = ..., api_version: _Optional[str] = ...) -> None: ...

class Caller(_message.Message):
    __slots__ = ["principal", "roles", "tenant"]
    PRINCIPAL_FIELD_NUMBER: _ClassVar[int]
    ROLES_FIELD_NUMBER: _ClassVar[int]
    TENANT_FIELD_NUMBER: _ClassVar[int]
    principal: str
    roles: _containers.RepeatedScalarFieldContainer[str]
    tenant: str
    def __init__(self, principal: _Optional[str] = ..., tenant: _Optional[str] = ..., roles: _Optional[_Iterable[str]] = ...) -> None: ...

class CancelRunRequest(_message.Message):
    __slots__ = ["reason", "run_id"]
    REASON_FIELD_NUMBER: _ClassVar[int]
    RUN_ID_FIELD_NUMBER: _ClassVar[int]
    reason: str
    run_id: str
    def __init__(self, run_id: _Optional[str] = ..., reason: _Optional[str] = ...) -> None: ...

class CancelRunResponse(_message.Message):
    __slots__ = ["run"]
    RUN_FIELD_NUMBER: _ClassVar[int]
    run: _run_pb2.Run
    def __init__(self, run: _Optional[_Union[_run_pb2.Run, _Mapping]] = ...) -> None: ...

class CreateScheduleRequest(_message.Message):
    __slots__ = ["schedule"]
    SCHEDULE_FIELD_NUMBER: _ClassVar[int]
    schedule: Schedule
    def __init__(self, schedule: _Optional[_Union[Schedule, _Mapping]] = ...) -> None: ...

class CreateScheduleResponse(_message.Message):
    __slots__ = ["schedule"]
    SCHEDULE_FIELD_NUMBER: _ClassVar[int]
    schedule: Schedule
    def __init__(self, schedule: _Optional[_Union[Schedule, _Mapping]] = ...) -> None: ...

class DecideApprovalRequest(_message.Message):
    __slots__ = ["arguments", "end_run", "proposal_hash", "proposal_id", "reason", "run_id", "verdict"]
    ARGUMENTS_FIELD_NUMBER: _ClassVar[int]
    END_RUN_FIELD_NUMBER: _ClassVar[int]
    PROPOSAL_HASH_FIELD_NUMBER: _ClassVar[int]
    PROPOSAL_ID_FIELD_NUMBER: _ClassVar[int]
    REASON_FIELD_NUMBER: _ClassVar[int]
    RUN_ID_FIELD_NUMBER: _ClassVar[int]
    VERDICT_FIELD_NUMBER: _ClassVar[int]
    arguments: _struct_pb2.Struct
    end_run: bool
    proposal_hash: str
    proposal_id: str
    reason: str
    run_id: str
    verdict: ApprovalVerdict
    def __init__(self, run_id: _Optional[str] = ..., proposal_id: _Optional[str] = ..., proposal_hash: _Optional[str] = ..., verdict: _Optional[_Union[ApprovalVerdict, str]] = ..., reason: _Optional[str] = ..., end_run: bool = ..., arguments: _Optional[_Union[_struct_pb2.Struct, _Mapping]] = ...) -> None: ...

class DecideApprovalResponse(_message.Message):
    __slots__ = ["run"]
    RUN_FIELD_NUMBER: _ClassVar[int]
    run: _run_pb2.Run
    def __init__(self, run: _Optional[_Union[_run_pb2.Run, _Mapping]] = ...) -> None: ...

class DeleteRunRequest(_message.Message):
    __slots__ = ["reason", "run_id", "tree"]
    REASON_FIELD_NUMBER: _ClassVar[int]
    RUN_ID_FIELD_NUMBER: _ClassVar[int]
    TREE_FIELD_NUMBER: _ClassVar[int]
    reason: str
    run_id: str
    tree: bool
    def __init__(self, run_id: _Optional[str] = ..., reason: _Optional[str] = ..., tree: bool = ...) -> None: ...

class DeleteRunResponse(_message.Message):
    __slots__ = ["deletions"]
    DELETIONS_FIELD_NUMBER: _ClassVar[int]
    deletions: _containers.RepeatedCompositeFieldContainer[RunDeletion]
    def __init__(self, deletions: _Optional[_Iterable[_Union[RunDeletion, _Mapping]]] = ...) -> None: ...

class DeleteScheduleRequest(_message.Message):
    __slots__ = ["name"]
    NAME_FIELD_NUMBER: _ClassVar[int]
    name: str
    def __init__(self, name: _Optional[str] = ...) -> None: ...

class DeleteScheduleResponse(_message.Message):
    __slots__ = []
    def __init__(self) -> None: ...

class ForkRunRequest(_message.Message):
    __slots__ = ["at_sequence", "budget", "request_id", "run_id"]
    AT_SEQUENCE_FIELD_NUMBER: _ClassVar[int]
    BUDGET_FIELD_NUMBER: _ClassVar[int]
    REQUEST_ID_FIELD_NUMBER: _ClassVar[int]
    RUN_ID_FIELD_NUMBER: _ClassVar[int]
    at_sequence: int
    budget: _contract_pb2.Budget
    request_id: str
    run_id: str
    def __init__(self, run_id: _Optional[str] = ..., at_sequence: _Optional[int] = ..., request_id: _Optional[str] = ..., budget: _Optional[_Union[_contract_pb2.Budget, _Mapping]] = ...) -> None: ...

class ForkRunResponse(_message.Message):
    __slots__ = ["created", "run"]
    CREATED_FIELD_NUMBER: _ClassVar[int]
    RUN_FIELD_NUMBER: _ClassVar[int]
    created: bool
    run: _run_pb2.Run
    def __init__(self, run: _Optional[_Union[_run_pb2.Run, _Mapping]] = ..., created: bool = ...) -> None: ...

class GetBlobsRequest(_message.Message):
    __slots__ = ["hashes", "run_id"]
    HASHES_FIELD_NUMBER: _ClassVar[int]
    RUN_ID_FIELD_NUMBER: _ClassVar[int]
    hashes: _containers.RepeatedScalarFieldContainer[str]
    run_id: str
    def __init__(self, run_id: _Optional[str] = ..., hashes: _Optional[_Iterable[str]] = ...) -> None: ...

class GetBlobsResponse(_message.Message):
    __slots__ = ["blobs"]
    class BlobsEntry(_message.Message):
        __slots__ = ["key", "value"]
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: bytes
        def __init__(self, key: _Optional[str] = ..., value: _Optional[bytes] = ...) -> None: ...
    BLOBS_FIELD_NUMBER: _ClassVar[int]
    blobs: _containers.ScalarMap[str, bytes]
    def __init__(self, blobs: _Optional[_Mapping[str, bytes]] = ...) -> None: ...

class GetRunRequest(_message.Message):
    __slots__ = ["run_id"]
    RUN_ID_FIELD_NUMBER: _ClassVar[int]
    run_id: str
    def __init__(self, run_id: _Optional[str] = ...) -> None: ...

class GetRunResponse(_message.Message):
    __slots__ = ["run"]
    RUN_FIELD_NUMBER: _ClassVar[int]
    run: _run_pb2.Run
    def __init__(self, run: _Optional[_Union[_run_pb2.Run, _Mapping]] = ...) -> None: ...

class GetServerInfoRequest(_message.Message):
    __slots__ = []
    def __init__(self) -> None: ...

class GetServerInfoResponse(_message.Message):
    __slots__ = ["build", "caller", "formats"]
    BUILD_FIELD_NUMBER: _ClassVar[int]
    CALLER_FIELD_NUMBER: _ClassVar[int]
    FORMATS_FIELD_NUMBER: _ClassVar[int]
    build: BuildInfo
    caller: Caller
    formats: _cluster_service_pb2.ServerFormats
    def __init__(self, build: _Optional[_Union[BuildInfo, _Mapping]] = ..., caller: _Optional[_Union[Caller, _Mapping]] = ..., formats: _Optional[_Union[_cluster_service_pb2.ServerFormats, _Mapping]] = ...) -> None: ...

class GetTaskRequest(_message.Message):
    __slots__ = ["name"]
    NAME_FIELD_NUMBER: _ClassVar[int]
    name: str
    def __init__(self, name: _Optional[str] = ...) -> None: ...

class GetTaskResponse(_message.Message):
    __slots__ = ["task"]
    TASK_FIELD_NUMBER: _ClassVar[int]
    task: Task
    def __init__(self, task: _Optional[_Union[Task, _Mapping]] = ...) -> None: ...

class ImportRunRequest(_message.Message):
    __slots__ = ["export"]
    EXPORT_FIELD_NUMBER: _ClassVar[int]
    export: _export_pb2.RunExport
    def __init__(self, export: _Optional[_Union[_export_pb2.RunExport, _Mapping]] = ...) -> None: ...

class ImportRunResponse(_message.Message):
    __slots__ = ["run"]
    RUN_FIELD_NUMBER: _ClassVar[int]
    run: _run_pb2.Run
    def __init__(self, run: _Optional[_Union[_run_pb2.Run, _Mapping]] = ...) -> None: ...

class ListDeletionsRequest(_message.Message):
    __slots__ = ["page_size", "page_token", "tenant"]
    PAGE_SIZE_FIELD_NUMBER: _ClassVar[int]
    PAGE_TOKEN_FIELD_NUMBER: _ClassVar[int]
    TENANT_FIELD_NUMBER: _ClassVar[int]
    page_size: int
    page_token: str
    tenant: str
    def __init__(self, page_size: _Optional[int] = ..., page_token: _Optional[str] = ..., tenant: _Optional[str] = ...) -> None: ...

class ListDeletionsResponse(_message.Message):
    __slots__ = ["deletions", "next_page_token"]
    DELETIONS_FIELD_NUMBER: _ClassVar[int]
    NEXT_PAGE_TOKEN_FIELD_NUMBER: _ClassVar[int]
    deletions: _containers.RepeatedCompositeFieldContainer[RunDeletion]
    next_page_token: str
    def __init__(self, deletions: _Optional[_Iterable[_Union[RunDeletion, _Mapping]]] = ..., next_page_token: _Optional[str] = ...) -> None: ...

class ListEventsRequest(_message.Message):
    __slots__ = ["after_sequence", "page_size", "page_token", "run_id"]
    AFTER_SEQUENCE_FIELD_NUMBER: _ClassVar[int]
    PAGE_SIZE_FIELD_NUMBER: _ClassVar[int]
    PAGE_TOKEN_FIELD_NUMBER: _ClassVar[int]
    RUN_ID_FIELD_NUMBER: _ClassVar[int]
    after_sequence: int
    page_size: int
    page_token: str
    run_id: str
    def __init__(self, run_id: _Optional[str] = ..., after_sequence: _Optional[int] = ..., page_size: _Optional[int] = ..., page_token: _Optional[str] = ...) -> None: ...

class ListEventsResponse(_message.Message):
    __slots__ = ["events", "next_page_token"]
    EVENTS_FIELD_NUMBER: _ClassVar[int]
    NEXT_PAGE_TOKEN_FIELD_NUMBER: _ClassVar[int]
    events: _containers.RepeatedCompositeFieldContainer[_event_pb2.Event]
    next_page_token: str
    def __init__(self, events: _Optional[_Iterable[_Union[_event_pb2.Event, _Mapping]]] = ..., next_page_token: _Optional[str] = ...) -> None: ...

class ListRunsRequest(_message.Message):
    __slots__ = ["labels", "page_size", "page_token", "parent_run_id", "statuses", "trace_id"]
    class LabelsEntry(_message.Message):
        __slots__ = ["key", "value"]
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: str
        def __init__(self, key: _Optional[str] = ..., value: _Optional[str] = ...) -> None: ...
    LABELS_FIELD_NUMBER: _ClassVar[int]
    PAGE_SIZE_FIELD_NUMBER: _ClassVar[int]
    PAGE_TOKEN_FIELD_NUMBER: _ClassVar[int]
    PARENT_RUN_ID_FIELD_NUMBER: _ClassVar[int]
    STATUSES_FIELD_NUMBER: _ClassVar[int]
    TRACE_ID_FIELD_NUMBER: _ClassVar[int]
    labels: _containers.ScalarMap[str, str]
    page_size: int
    page_token: str
    parent_run_id: str
    statuses: _containers.RepeatedScalarFieldContainer[_run_pb2.RunStatus]
    trace_id: str
    def __init__(self, statuses: _Optional[_Iterable[_Union[_run_pb2.RunStatus, str]]] = ..., labels: _Optional[_Mapping[str, str]] = ..., page_size: _Optional[int] = ..., page_token: _Optional[str] = ..., trace_id: _Optional[str] = ..., parent_run_id: _Optional[str] = ...) -> None: ...

class ListRunsResponse(_message.Message):
    __slots__ = ["next_page_token", "runs"]
    NEXT_PAGE_TOKEN_FIELD_NUMBER: _ClassVar[int]
    RUNS_FIELD_NUMBER: _ClassVar[int]
    next_page_token: str
    runs: _containers.RepeatedCompositeFieldContainer[_run_pb2.Run]
    def __init__(self, runs: _Optional[_Iterable[_Union[_run_pb2.Run, _Mapping]]] = ..., next_page_token: _Optional[str] = ...) -> None: ...

class ListSchedulesRequest(_message.Message):
    __slots__ = []
    def __init__(self) -> None: ...

class ListSchedulesResponse(_message.Message):
    __slots__ = ["schedules"]
    SCHEDULES_FIELD_NUMBER: _ClassVar[int]
    schedules: _containers.RepeatedCompositeFieldContainer[Schedule]
    def __init__(self, schedules: _Optional[_Iterable[_Union[Schedule, _Mapping]]] = ...) -> None: ...

class ListTasksRequest(_message.Message):
    __slots__ = []
    def __init__(self) -> None: ...

class ListTasksResponse(_message.Message):
    __slots__ = ["tasks"]
    TASKS_FIELD_NUMBER: _ClassVar[int]
    tasks: _containers.RepeatedCompositeFieldContainer[Task]
    def __init__(self, tasks: _Optional[_Iterable[_Union[Task, _Mapping]]] = ...) -> None: ...

class ModelOutput(_message.Message):
    __slots__ = ["attempt", "done", "offset", "requested", "resumed", "step", "text", "truncated"]
    ATTEMPT_FIELD_NUMBER: _ClassVar[int]
    DONE_FIELD_NUMBER: _ClassVar[int]
    OFFSET_FIELD_NUMBER: _ClassVar[int]
    REQUESTED_FIELD_NUMBER: _ClassVar[int]
    RESUMED_FIELD_NUMBER: _ClassVar[int]
    STEP_FIELD_NUMBER: _ClassVar[int]
    TEXT_FIELD_NUMBER: _ClassVar[int]
    TRUNCATED_FIELD_NUMBER: _ClassVar[int]
    attempt: int
    done: bool
    offset: int
    requested: int
    resumed: bool
    step: int
    text: str
    truncated: bool
    def __init__(self, requested: _Optional[int] = ..., step: _Optional[int] = ..., attempt: _Optional[int] = ..., resumed: bool = ..., offset: _Optional[int] = ..., text: _Optional[str] = ..., done: bool = ..., truncated: bool = ...) -> None: ...

class PauseScheduleRequest(_message.Message):
    __slots__ = ["name"]
    NAME_FIELD_NUMBER: _ClassVar[int]
    name: str
    def __init__(self, name: _Optional[str] = ...) -> None: ...

class PauseScheduleResponse(_message.Message):
    __slots__ = ["schedule"]
    SCHEDULE_FIELD_NUMBER: _ClassVar[int]
    schedule: Schedule
    def __init__(self, schedule: _Optional[_Union[Schedule, _Mapping]] = ...) -> None: ...

class ProvideInputRequest(_message.Message):
    __slots__ = ["run_id", "text"]
    RUN_ID_FIELD_NUMBER: _ClassVar[int]
    TEXT_FIELD_NUMBER: _ClassVar[int]
    run_id: str
    text: str
    def __init__(self, run_id: _Optional[str] = ..., text: _Optional[str] = ...) -> None: ...

class ProvideInputResponse(_message.Message):
    __slots__ = ["run"]
    RUN_FIELD_NUMBER: _ClassVar[int]
    run: _run_pb2.Run
    def __init__(self, run: _Optional[_Union[_run_pb2.Run, _Mapping]] = ...) -> None: ...

class RaiseBudgetRequest(_message.Message):
    __slots__ = ["add_cost_usd", "add_steps", "add_tokens", "add_tool_calls", "extend_deadline", "reason", "run_id"]
    ADD_COST_USD_FIELD_NUMBER: _ClassVar[int]
    ADD_STEPS_FIELD_NUMBER: _ClassVar[int]
    ADD_TOKENS_FIELD_NUMBER: _ClassVar[int]
    ADD_TOOL_CALLS_FIELD_NUMBER: _ClassVar[int]
    EXTEND_DEADLINE_FIELD_NUMBER: _ClassVar[int]
    REASON_FIELD_NUMBER: _ClassVar[int]
    RUN_ID_FIELD_NUMBER: _ClassVar[int]
    add_cost_usd: float
    add_steps: int
    add_tokens: int
    add_tool_calls: int
    extend_deadline: _duration_pb2.Duration
    reason: str
    run_id: str
    def __init__(self, run_id: _Optional[str] = ..., add_steps: _Optional[int] = ..., add_tokens: _Optional[int] = ..., add_cost_usd: _Optional[float] = ..., extend_deadline: _Optional[_Union[_duration_pb2.Duration, _Mapping]] = ..., reason: _Optional[str] = ..., add_tool_calls: _Optional[int] = ...) -> None: ...

class RaiseBudgetResponse(_message.Message):
    __slots__ = ["run"]
    RUN_FIELD_NUMBER: _ClassVar[int]
    run: _run_pb2.Run
    def __init__(self, run: _Optional[_Union[_run_pb2.Run, _Mapping]] = ...) -> None: ...

class ResumeScheduleRequest(_message.Message):
    __slots__ = ["name"]
    NAME_FIELD_NUMBER: _ClassVar[int]
    name: str
    def __init__(self, name: _Optional[str] = ...) -> None: ...

class ResumeScheduleResponse(_message.Message):
    __slots__ = ["schedule"]
    SCHEDULE_FIELD_NUMBER: _ClassVar[int]
    schedule: Schedule
    def __init__(self, schedule: _Optional[_Union[Schedule, _Mapping]] = ...) -> None: ...

class RunChange(_message.Message):
    __slots__ = ["changed_at", "cursor", "previous", "reason", "run_id", "status", "version"]
    CHANGED_AT_FIELD_NUMBER: _ClassVar[int]
    CURSOR_FIELD_NUMBER: _ClassVar[int]
    PREVIOUS_FIELD_NUMBER: _ClassVar[int]
    REASON_FIELD_NUMBER: _ClassVar[int]
    RUN_ID_FIELD_NUMBER: _ClassVar[int]
    STATUS_FIELD_NUMBER: _ClassVar[int]
    VERSION_FIELD_NUMBER: _ClassVar[int]
    changed_at: _timestamp_pb2.Timestamp
    cursor: int
    previous: _run_pb2.RunStatus
    reason: str
    run_id: str
    status: _run_pb2.RunStatus
    version: int
    def __init__(self, cursor: _Optional[int] = ..., run_id: _Optional[str] = ..., previous: _Optional[_Union[_run_pb2.RunStatus, str]] = ..., status: _Optional[_Union[_run_pb2.RunStatus, str]] = ..., version: _Optional[int] = ..., reason: _Optional[str] = ..., changed_at: _Optional[_Union[_timestamp_pb2.Timestamp, _Mapping]] = ...) -> None: ...

class RunDeletion(_message.Message):
    __slots__ = ["archived", "deleted_at", "deleted_by", "reason", "run_id", "status", "tenant"]
    ARCHIVED_FIELD_NUMBER: _ClassVar[int]
    DELETED_AT_FIELD_NUMBER: _ClassVar[int]
    DELETED_BY_FIELD_NUMBER: _ClassVar[int]
    REASON_FIELD_NUMBER: _ClassVar[int]
    RUN_ID_FIELD_NUMBER: _ClassVar[int]
    STATUS_FIELD_NUMBER: _ClassVar[int]
    TENANT_FIELD_NUMBER: _ClassVar[int]
    archived: bool
    deleted_at: _timestamp_pb2.Timestamp
    deleted_by: str
    reason: str
    run_id: str
    status: _run_pb2.RunStatus
    tenant: str
    def __init__(self, run_id: _Optional[str] = ..., tenant: _Optional[str] = ..., deleted_by: _Optional[str] = ..., deleted_at: _Optional[_Union[_timestamp_pb2.Timestamp, _Mapping]] = ..., reason: _Optional[str] = ..., status: _Optional[_Union[_run_pb2.RunStatus, str]] = ..., archived: bool = ...) -> None: ...

class Schedule(_message.Message):
    __slots__ = ["catch_up", "contract", "created_at", "created_by", "cron", "last_run_id", "last_tick", "name", "next_tick", "overlap", "paused", "tenant", "time_zone"]
    CATCH_UP_FIELD_NUMBER: _ClassVar[int]
    CONTRACT_FIELD_NUMBER: _ClassVar[int]
    CREATED_AT_FIELD_NUMBER: _ClassVar[int]
    CREATED_BY_FIELD_NUMBER: _ClassVar[int]
    CRON_FIELD_NUMBER: _ClassVar[int]
    LAST_RUN_ID_FIELD_NUMBER: _ClassVar[int]
    LAST_TICK_FIELD_NUMBER: _ClassVar[int]
    NAME_FIELD_NUMBER: _ClassVar[int]
    NEXT_TICK_FIELD_NUMBER: _ClassVar[int]
    OVERLAP_FIELD_NUMBER: _ClassVar[int]
    PAUSED_FIELD_NUMBER: _ClassVar[int]
    TENANT_FIELD_NUMBER: _ClassVar[int]
    TIME_ZONE_FIELD_NUMBER: _ClassVar[int]
    catch_up: ScheduleCatchUp
    contract: _contract_pb2.TaskContract
    created_at: _timestamp_pb2.Timestamp
    created_by: str
    cron: str
    last_run_id: str
    last_tick: _timestamp_pb2.Timestamp
    name: str
    next_tick: _timestamp_pb2.Timestamp
    overlap: ScheduleOverlap
    paused: bool
    tenant: str
    time_zone: str
    def __init__(self, name: _Optional[str] = ..., tenant: _Optional[str] = ..., cron: _Optional[str] = ..., time_zone: _Optional[str] = ..., contract: _Optional[_Union[_contract_pb2.TaskContract, _Mapping]] = ..., overlap: _Optional[_Union[ScheduleOverlap, str]] = ..., catch_up: _Optional[_Union[ScheduleCatchUp, str]] = ..., paused: bool = ..., created_by: _Optional[str] = ..., created_at: _Optional[_Union[_timestamp_pb2.Timestamp, _Mapping]] = ..., last_tick: _Optional[_Union[_timestamp_pb2.Timestamp, _Mapping]] = ..., last_run_id: _Optional[str] = ..., next_tick: _Optional[_Union[_timestamp_pb2.Timestamp, _Mapping]] = ...) -> None: ...

class StartRunRequest(_message.Message):
    __slots__ = ["contract", "inputs", "request_id", "task"]
    CONTRACT_FIELD_NUMBER: _ClassVar[int]
    INPUTS_FIELD_NUMBER: _ClassVar[int]
    REQUEST_ID_FIELD_NUMBER: _ClassVar[int]
    TASK_FIELD_NUMBER: _ClassVar[int]
    contract: _contract_pb2.TaskContract
    inputs: _struct_pb2.Struct
    request_id: str
    task: str
    def __init__(self, request_id: _Optional[str] = ..., contract: _Optional[_Union[_contract_pb2.TaskContract, _Mapping]] = ..., task: _Optional[str] = ..., inputs: _Optional[_Union[_struct_pb2.Struct, _Mapping]] = ...) -> None: ...

class StartRunResponse(_message.Message):
    __slots__ = ["created", "run", "warnings"]
    CREATED_FIELD_NUMBER: _ClassVar[int]
    RUN_FIELD_NUMBER: _ClassVar[int]
    WARNINGS_FIELD_NUMBER: _ClassVar[int]
    created: bool
    run: _run_pb2.Run
    warnings: _containers.RepeatedScalarFieldContainer[str]
    def __init__(self, run: _Optional[_Union[_run_pb2.Run, _Mapping]] = ..., created: bool = ..., warnings: _Optional[_Iterable[str]] = ...) -> None: ...

class SteerRunRequest(_message.Message):
    __slots__ = ["request_id", "run_id", "text"]
    REQUEST_ID_FIELD_NUMBER: _ClassVar[int]
    RUN_ID_FIELD_NUMBER: _ClassVar[int]
    TEXT_FIELD_NUMBER: _ClassVar[int]
    request_id: str
    run_id: str
    text: str
    def __init__(self, run_id: _Optional[str] = ..., text: _Optional[str] = ..., request_id: _Optional[str] = ...) -> None: ...

class SteerRunResponse(_message.Message):
    __slots__ = ["created", "run"]
    CREATED_FIELD_NUMBER: _ClassVar[int]
    RUN_FIELD_NUMBER: _ClassVar[int]
    created: bool
    run: _run_pb2.Run
    def __init__(self, run: _Optional[_Union[_run_pb2.Run, _Mapping]] = ..., created: bool = ...) -> None: ...

class Task(_message.Message):
    __slots__ = ["description", "digest", "input_schema", "name"]
    DESCRIPTION_FIELD_NUMBER: _ClassVar[int]
    DIGEST_FIELD_NUMBER: _ClassVar[int]
    INPUT_SCHEMA_FIELD_NUMBER: _ClassVar[int]
    NAME_FIELD_NUMBER: _ClassVar[int]
    description: str
    digest: str
    input_schema: _struct_pb2.Struct
    name: str
    def __init__(self, name: _Optional[str] = ..., description: _Optional[str] = ..., input_schema: _Optional[_Union[_struct_pb2.Struct, _Mapping]] = ..., digest: _Optional[str] = ...) -> None: ...

class TriggerScheduleRequest(_message.Message):
    __slots__ = ["name", "request_id"]
    NAME_FIELD_NUMBER: _ClassVar[int]
    REQUEST_ID_FIELD_NUMBER: _ClassVar[int]
    name: str
    request_id: str
    def __init__(self, name: _Optional[str] = ..., request_id: _Optional[str] = ...) -> None: ...

class TriggerScheduleResponse(_message.Message):
    __slots__ = ["run"]
    RUN_FIELD_NUMBER: _ClassVar[int]
    run: _run_pb2.Run
    def __init__(self, run: _Optional[_Union[_run_pb2.Run, _Mapping]] = ...) -> None: ...

class WatchRunRequest(_message.Message):
    __slots__ = ["after_sequence", "model_output", "run_id"]
    AFTER_SEQUENCE_FIELD_NUMBER: _ClassVar[int]
    MODEL_OUTPUT_FIELD_NUMBER: _ClassVar[int]
    RUN_ID_FIELD_NUMBER: _ClassVar[int]
    after_sequence: int
    model_output: bool
    run_id: str
    def __init__(self, run_id: _Optional[str] = ..., after_sequence: _Optional[int] = ..., model_output: bool = ...) -> None: ...

class WatchRunResponse(_message.Message):
    __slots__ = ["event", "output"]
    EVENT_FIELD_NUMBER: _ClassVar[int]
    OUTPUT_FIELD_NUMBER: _ClassVar[int]
    event: _event_pb2.Event
    output: ModelOutput
    def __init__(self, event: _Optional[_Union[_event_pb2.Event, _Mapping]] = ..., output: _Optional[_Union[ModelOutput, _Mapping]] = ...) -> None: ...

class WatchRunsRequest(_message.Message):
    __slots__ = ["after_cursor", "labels", "statuses"]
    class LabelsEntry(_message.Message):
        __slots__ = ["key", "value"]
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: str
        def __init__(self, key: _Optional[str] = ..., value: _Optional[str] = ...) -> None: ...
    AFTER_CURSOR_FIELD_NUMBER: _ClassVar[int]
    LABELS_FIELD_NUMBER: _ClassVar[int]
    STATUSES_FIELD_NUMBER: _ClassVar[int]
    after_cursor: int
    labels: _containers.ScalarMap[str, str]
    statuses: _containers.RepeatedScalarFieldContainer[_run_pb2.RunStatus]
    def __init__(self, statuses: _Optional[_Iterable[_Union[_run_pb2.RunStatus, str]]] = ..., labels: _Optional[_Mapping[str, str]] = ..., after_cursor: _Optional[int] = ...) -> None: ...

class WatchRunsResponse(_message.Message):
    __slots__ = ["change"]
    CHANGE_FIELD_NUMBER: _ClassVar[int]
    change: RunChange
    def __init__(self, change: _Optional[_Union[RunChange, _Mapping]] = ...) -> None: ...

class ScheduleOverlap(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = []

class ScheduleCatchUp(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = []

class ApprovalVerdict(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = []
