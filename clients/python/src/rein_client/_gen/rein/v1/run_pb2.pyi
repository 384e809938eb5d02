from google.protobuf import duration_pb2 as _duration_pb2
from google.protobuf import struct_pb2 as _struct_pb2
from google.protobuf import timestamp_pb2 as _timestamp_pb2
from rein_client._gen.rein.v1 import contract_pb2 as _contract_pb2
from rein_client._gen.rein.v1 import decision_pb2 as _decision_pb2
from google.protobuf.internal import containers as _containers
from google.protobuf.internal import enum_type_wrapper as _enum_type_wrapper
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from typing import ClassVar as _ClassVar, Iterable as _Iterable, Mapping as _Mapping, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor
POLICY_SOURCE_CONTRACT: PolicySource
POLICY_SOURCE_SERVER: PolicySource
POLICY_SOURCE_SERVICE: PolicySource
POLICY_SOURCE_UNSPECIFIED: PolicySource
RUN_STATUS_BUDGET_EXHAUSTED: RunStatus
RUN_STATUS_CANCELLED: RunStatus
RUN_STATUS_COMPLETED: RunStatus
RUN_STATUS_DENIED: RunStatus
RUN_STATUS_EXPIRED: RunStatus
RUN_STATUS_FAILED: RunStatus
RUN_STATUS_NEEDS_APPROVAL: RunStatus
RUN_STATUS_NEEDS_BUDGET: RunStatus
RUN_STATUS_NEEDS_INPUT: RunStatus
RUN_STATUS_QUEUED: RunStatus
RUN_STATUS_RUNNING: RunStatus
RUN_STATUS_UNSPECIFIED: RunStatus

class BudgetPause(_message.Message):
    __slots__ = ["child_run_id", "detail", "expires_at", "limit", "next_call_cost_usd", "next_call_tokens"]
    CHILD_RUN_ID_FIELD_NUMBER: _ClassVar[int]
    DETAIL_FIELD_NUMBER: _ClassVar[int]
    EXPIRES_AT_FIELD_NUMBER: _ClassVar[int]
    LIMIT_FIELD_NUMBER: _ClassVar[int]
    NEXT_CALL_COST_USD_FIELD_NUMBER: _ClassVar[int]
    NEXT_CALL_TOKENS_FIELD_NUMBER: _ClassVar[int]
    child_run_id: str
    detail: str
    expires_at: _timestamp_pb2.Timestamp
    limit: str
    next_call_cost_usd: float
    next_call_tokens: int
    def __init__(self, limit: _Optional[str] = ..., detail: _Optional[str] = ..., expires_at: _Optional[_Union[_timestamp_pb2.Timestamp, _Mapping]] = ..., child_run_id: _Optional[str] = ..., next_call_tokens: _Optional[int] = ..., next_call_cost_usd: _Optional[float] = ...) -> None: ...

class ChildLoan(_message.Message):
    __slots__ = ["lent", "run_id"]
    LENT_FIELD_NUMBER: _ClassVar[int]
    RUN_ID_FIELD_NUMBER: _ClassVar[int]
    lent: Spend
    run_id: str
    def __init__(self, run_id: _Optional[str] = ..., lent: _Optional[_Union[Spend, _Mapping]] = ...) -> None: ...

class DelegatedBy(_message.Message):
    __slots__ = ["depth", "parent_run_id", "root_run_id", "sequence", "task_index"]
    DEPTH_FIELD_NUMBER: _ClassVar[int]
    PARENT_RUN_ID_FIELD_NUMBER: _ClassVar[int]
    ROOT_RUN_ID_FIELD_NUMBER: _ClassVar[int]
    SEQUENCE_FIELD_NUMBER: _ClassVar[int]
    TASK_INDEX_FIELD_NUMBER: _ClassVar[int]
    depth: int
    parent_run_id: str
    root_run_id: str
    sequence: int
    task_index: int
    def __init__(self, parent_run_id: _Optional[str] = ..., sequence: _Optional[int] = ..., task_index: _Optional[int] = ..., root_run_id: _Optional[str] = ..., depth: _Optional[int] = ...) -> None: ...

class PendingAction(_message.Message):
    __slots__ = ["budget", "ends_at", "ends_by", "proposal", "question"]
    BUDGET_FIELD_NUMBER: _ClassVar[int]
    ENDS_AT_FIELD_NUMBER: _ClassVar[int]
    ENDS_BY_FIELD_NUMBER: _ClassVar[int]
    PROPOSAL_FIELD_NUMBER: _ClassVar[int]
    QUESTION_FIELD_NUMBER: _ClassVar[int]
    budget: BudgetPause
    ends_at: _timestamp_pb2.Timestamp
    ends_by: str
    proposal: Proposal
    question: Question
    def __init__(self, proposal: _Optional[_Union[Proposal, _Mapping]] = ..., question: _Optional[_Union[Question, _Mapping]] = ..., budget: _Optional[_Union[BudgetPause, _Mapping]] = ..., ends_at: _Optional[_Union[_timestamp_pb2.Timestamp, _Mapping]] = ..., ends_by: _Optional[str] = ...) -> None: ...

class PolicyDecided(_message.Message):
    __slots__ = ["approvals", "call_id", "effect", "error", "latency", "message", "policy_digest", "rule", "source", "tool", "when"]
    APPROVALS_FIELD_NUMBER: _ClassVar[int]
    CALL_ID_FIELD_NUMBER: _ClassVar[int]
    EFFECT_FIELD_NUMBER: _ClassVar[int]
    ERROR_FIELD_NUMBER: _ClassVar[int]
    LATENCY_FIELD_NUMBER: _ClassVar[int]
    MESSAGE_FIELD_NUMBER: _ClassVar[int]
    POLICY_DIGEST_FIELD_NUMBER: _ClassVar[int]
    RULE_FIELD_NUMBER: _ClassVar[int]
    SOURCE_FIELD_NUMBER: _ClassVar[int]
    TOOL_FIELD_NUMBER: _ClassVar[int]
    WHEN_FIELD_NUMBER: _ClassVar[int]
    approvals: int
    call_id: str
    effect: _contract_pb2.PolicyEffect
    error: str
    latency: _duration_pb2.Duration
    message: str
    policy_digest: str
    rule: str
    source: PolicySource
    tool: str
    when: str
    def __init__(self, call_id: _Optional[str] = ..., tool: _Optional[str] = ..., effect: _Optional[_Union[_contract_pb2.PolicyEffect, str]] = ..., source: _Optional[_Union[PolicySource, str]] = ..., rule: _Optional[str] = ..., when: _Optional[str] = ..., message: _Optional[str] = ..., approvals: _Optional[int] = ..., latency: _Optional[_Union[_duration_pb2.Duration, _Mapping]] = ..., error: _Optional[str] = ..., policy_digest: _Optional[str] = ...) -> None: ...

class Proposal(_message.Message):
    __slots__ = ["approvals", "approved_by", "arguments", "arguments_blob", "call_id", "expires_at", "hash", "policy_message", "policy_rule", "preview", "preview_blob", "proposal_id", "revised_by", "revision_reason", "run_version", "tier", "tool", "tool_digest", "unchecked_arguments"]
    APPROVALS_FIELD_NUMBER: _ClassVar[int]
    APPROVED_BY_FIELD_NUMBER: _ClassVar[int]
    ARGUMENTS_BLOB_FIELD_NUMBER: _ClassVar[int]
    ARGUMENTS_FIELD_NUMBER: _ClassVar[int]
    CALL_ID_FIELD_NUMBER: _ClassVar[int]
    EXPIRES_AT_FIELD_NUMBER: _ClassVar[int]
    HASH_FIELD_NUMBER: _ClassVar[int]
    POLICY_MESSAGE_FIELD_NUMBER: _ClassVar[int]
    POLICY_RULE_FIELD_NUMBER: _ClassVar[int]
    PREVIEW_BLOB_FIELD_NUMBER: _ClassVar[int]
    PREVIEW_FIELD_NUMBER: _ClassVar[int]
    PROPOSAL_ID_FIELD_NUMBER: _ClassVar[int]
    REVISED_BY_FIELD_NUMBER: _ClassVar[int]
    REVISION_REASON_FIELD_NUMBER: _ClassVar[int]
    RUN_VERSION_FIELD_NUMBER: _ClassVar[int]
    TIER_FIELD_NUMBER: _ClassVar[int]
    TOOL_DIGEST_FIELD_NUMBER: _ClassVar[int]
    TOOL_FIELD_NUMBER: _ClassVar[int]
    UNCHECKED_ARGUMENTS_FIELD_NUMBER: _ClassVar[int]
    approvals: int
    approved_by: _containers.RepeatedScalarFieldContainer[str]
    arguments: _struct_pb2.Struct
    arguments_blob: str
    call_id: str
    expires_at: _timestamp_pb2.Timestamp
    hash: str
    policy_message: str
    policy_rule: str
    preview: _struct_pb2.Value
    preview_blob: str
    proposal_id: str
    revised_by: str
    revision_reason: str
    run_version: int
    tier: _contract_pb2.ToolTier
    tool: str
    tool_digest: str
    unchecked_arguments: bool
    def __init__(self, proposal_id: _Optional[str] = ..., tool: _Optional[str] = ..., arguments: _Optional[_Union[_struct_pb2.Struct, _Mapping]] = ..., preview: _Optional[_Union[_struct_pb2.Value, _Mapping]] = ..., hash: _Optional[str] = ..., expires_at: _Optional[_Union[_timestamp_pb2.Timestamp, _Mapping]] = ..., run_version: _Optional[int] = ..., call_id: _Optional[str] = ..., preview_blob: _Optional[str] = ..., arguments_blob: _Optional[str] = ..., revised_by: _Optional[str] = ..., approvals: _Optional[int] = ..., approved_by: _Optional[_Iterable[str]] = ..., tier: _Optional[_Union[_contract_pb2.ToolTier, str]] = ..., policy_rule: _Optional[str] = ..., policy_message: _Optional[str] = ..., unchecked_arguments: bool = ..., revision_reason: _Optional[str] = ..., tool_digest: _Optional[str] = ...) -> None: ...

class Question(_message.Message):
    __slots__ = ["call_id", "text"]
    CALL_ID_FIELD_NUMBER: _ClassVar[int]
    TEXT_FIELD_NUMBER: _ClassVar[int]
    call_id: str
    text: str
    def __init__(self, text: _Optional[str] = ..., call_id: _Optional[str] = ...) -> None: ...

class Run(_message.Message):
    __slots__ = ["approved_write", "archive", "budget_raised", "contract", "cost_usd", "created_at", "deadline", "delegated_by", "delegation", "last_error", "model_in_flight", "pending", "policy_digest", "principal", "progress", "prompt_cache_key", "queue_position", "request_id", "result", "run_id", "status", "status_reason", "steps", "tenant", "tool_calls", "tool_digests", "trace_id", "trace_parent_span_id", "updated_at", "usage", "version", "write_operation_id"]
    APPROVED_WRITE_FIELD_NUMBER: _ClassVar[int]
    ARCHIVE_FIELD_NUMBER: _ClassVar[int]
    BUDGET_RAISED_FIELD_NUMBER: _ClassVar[int]
    CONTRACT_FIELD_NUMBER: _ClassVar[int]
    COST_USD_FIELD_NUMBER: _ClassVar[int]
    CREATED_AT_FIELD_NUMBER: _ClassVar[int]
    DEADLINE_FIELD_NUMBER: _ClassVar[int]
    DELEGATED_BY_FIELD_NUMBER: _ClassVar[int]
    DELEGATION_FIELD_NUMBER: _ClassVar[int]
    LAST_ERROR_FIELD_NUMBER: _ClassVar[int]
    MODEL_IN_FLIGHT_FIELD_NUMBER: _ClassVar[int]
    PENDING_FIELD_NUMBER: _ClassVar[int]
    POLICY_DIGEST_FIELD_NUMBER: _ClassVar[int]
    PRINCIPAL_FIELD_NUMBER: _ClassVar[int]
    PROGRESS_FIELD_NUMBER: _ClassVar[int]
    PROMPT_CACHE_KEY_FIELD_NUMBER: _ClassVar[int]
    QUEUE_POSITION_FIELD_NUMBER: _ClassVar[int]
    REQUEST_ID_FIELD_NUMBER: _ClassVar[int]
    RESULT_FIELD_NUMBER: _ClassVar[int]
    RUN_ID_FIELD_NUMBER: _ClassVar[int]
    STATUS_FIELD_NUMBER: _ClassVar[int]
    STATUS_REASON_FIELD_NUMBER: _ClassVar[int]
    STEPS_FIELD_NUMBER: _ClassVar[int]
    TENANT_FIELD_NUMBER: _ClassVar[int]
    TOOL_CALLS_FIELD_NUMBER: _ClassVar[int]
    TOOL_DIGESTS_FIELD_NUMBER: _ClassVar[int]
    TRACE_ID_FIELD_NUMBER: _ClassVar[int]
    TRACE_PARENT_SPAN_ID_FIELD_NUMBER: _ClassVar[int]
    UPDATED_AT_FIELD_NUMBER: _ClassVar[int]
    USAGE_FIELD_NUMBER: _ClassVar[int]
    VERSION_FIELD_NUMBER: _ClassVar[int]
    WRITE_OPERATION_ID_FIELD_NUMBER: _ClassVar[int]
    approved_write: Proposal
    archive: RunArchive
    budget_raised: Spend
    contract: _contract_pb2.TaskContract
    cost_usd: float
    created_at: _timestamp_pb2.Timestamp
    deadline: _timestamp_pb2.Timestamp
    delegated_by: DelegatedBy
    delegation: RunDelegation
    last_error: str
    model_in_flight: bool
    pending: PendingAction
    policy_digest: str
    principal: str
    progress: RunProgress
    prompt_cache_key: str
    queue_position: int
    request_id: str
    result: _decision_pb2.FinalAnswer
    run_id: str
    status: RunStatus
    status_reason: str
    steps: int
    tenant: str
    tool_calls: int
    tool_digests: _containers.RepeatedCompositeFieldContainer[ToolDigest]
    trace_id: str
    trace_parent_span_id: str
    updated_at: _timestamp_pb2.Timestamp
    usage: _contract_pb2.Usage
    version: int
    write_operation_id: str
    def __init__(self, run_id: _Optional[str] = ..., status: _Optional[_Union[RunStatus, str]] = ..., contract: _Optional[_Union[_contract_pb2.TaskContract, _Mapping]] = ..., principal: _Optional[str] = ..., tenant: _Optional[str] = ..., version: _Optional[int] = ..., steps: _Optional[int] = ..., usage: _Optional[_Union[_contract_pb2.Usage, _Mapping]] = ..., tool_calls: _Optional[int] = ..., deadline: _Optional[_Union[_timestamp_pb2.Timestamp, _Mapping]] = ..., pending: _Optional[_Union[PendingAction, _Mapping]] = ..., result: _Optional[_Union[_decision_pb2.FinalAnswer, _Mapping]] = ..., last_error: _Optional[str] = ..., created_at: _Optional[_Union[_timestamp_pb2.Timestamp, _Mapping]] = ..., updated_at: _Optional[_Union[_timestamp_pb2.Timestamp, _Mapping]] = ..., request_id: _Optional[str] = ..., status_reason: _Optional[str] = ..., model_in_flight: bool = ..., approved_write: _Optional[_Union[Proposal, _Mapping]] = ..., write_operation_id: _Optional[str] = ..., cost_usd: _Optional[float] = ..., progress: _Optional[_Union[RunProgress, _Mapping]] = ..., trace_id: _Optional[str] = ..., trace_parent_span_id: _Optional[str] = ..., delegated_by: _Optional[_Union[DelegatedBy, _Mapping]] = ..., delegation: _Optional[_Union[RunDelegation, _Mapping]] = ..., archive: _Optional[_Union[RunArchive, _Mapping]] = ..., budget_raised: _Optional[_Union[Spend, _Mapping]] = ..., queue_position: _Optional[int] = ..., prompt_cache_key: _Optional[str] = ..., tool_digests: _Optional[_Iterable[_Union[ToolDigest, _Mapping]]] = ..., policy_digest: _Optional[str] = ...) -> None: ...

class RunArchive(_message.Message):
    __slots__ = ["archived_at", "key", "sha256", "size_bytes"]
    ARCHIVED_AT_FIELD_NUMBER: _ClassVar[int]
    KEY_FIELD_NUMBER: _ClassVar[int]
    SHA256_FIELD_NUMBER: _ClassVar[int]
    SIZE_BYTES_FIELD_NUMBER: _ClassVar[int]
    archived_at: _timestamp_pb2.Timestamp
    key: str
    sha256: str
    size_bytes: int
    def __init__(self, key: _Optional[str] = ..., sha256: _Optional[str] = ..., size_bytes: _Optional[int] = ..., archived_at: _Optional[_Union[_timestamp_pb2.Timestamp, _Mapping]] = ...) -> None: ...

class RunDelegation(_message.Message):
    __slots__ = ["children_started", "lent", "open_children", "returned"]
    CHILDREN_STARTED_FIELD_NUMBER: _ClassVar[int]
    LENT_FIELD_NUMBER: _ClassVar[int]
    OPEN_CHILDREN_FIELD_NUMBER: _ClassVar[int]
    RETURNED_FIELD_NUMBER: _ClassVar[int]
    children_started: int
    lent: Spend
    open_children: _containers.RepeatedCompositeFieldContainer[ChildLoan]
    returned: Spend
    def __init__(self, children_started: _Optional[int] = ..., open_children: _Optional[_Iterable[_Union[ChildLoan, _Mapping]]] = ..., lent: _Optional[_Union[Spend, _Mapping]] = ..., returned: _Optional[_Union[Spend, _Mapping]] = ...) -> None: ...

class RunProgress(_message.Message):
    __slots__ = ["failing_checks_hash", "failing_checks_repeated", "open_call", "open_call_tier", "policy", "price", "steer_request_ids", "steers_waiting", "tool_calls_by_tool"]
    class Price(_message.Message):
        __slots__ = ["input_per_mtok", "output_per_mtok"]
        INPUT_PER_MTOK_FIELD_NUMBER: _ClassVar[int]
        OUTPUT_PER_MTOK_FIELD_NUMBER: _ClassVar[int]
        input_per_mtok: float
        output_per_mtok: float
        def __init__(self, input_per_mtok: _Optional[float] = ..., output_per_mtok: _Optional[float] = ...) -> None: ...
    class ToolCallsByToolEntry(_message.Message):
        __slots__ = ["key", "value"]
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: int
        def __init__(self, key: _Optional[str] = ..., value: _Optional[int] = ...) -> None: ...
    FAILING_CHECKS_HASH_FIELD_NUMBER: _ClassVar[int]
    FAILING_CHECKS_REPEATED_FIELD_NUMBER: _ClassVar[int]
    OPEN_CALL_FIELD_NUMBER: _ClassVar[int]
    OPEN_CALL_TIER_FIELD_NUMBER: _ClassVar[int]
    POLICY_FIELD_NUMBER: _ClassVar[int]
    PRICE_FIELD_NUMBER: _ClassVar[int]
    STEERS_WAITING_FIELD_NUMBER: _ClassVar[int]
    STEER_REQUEST_IDS_FIELD_NUMBER: _ClassVar[int]
    TOOL_CALLS_BY_TOOL_FIELD_NUMBER: _ClassVar[int]
    failing_checks_hash: str
    failing_checks_repeated: int
    open_call: _decision_pb2.ToolCall
    open_call_tier: _contract_pb2.ToolTier
    policy: PolicyDecided
    price: RunProgress.Price
    steer_request_ids: _containers.RepeatedScalarFieldContainer[str]
    steers_waiting: int
    tool_calls_by_tool: _containers.ScalarMap[str, int]
    def __init__(self, open_call: _Optional[_Union[_decision_pb2.ToolCall, _Mapping]] = ..., open_call_tier: _Optional[_Union[_contract_pb2.ToolTier, str]] = ..., tool_calls_by_tool: _Optional[_Mapping[str, int]] = ..., failing_checks_hash: _Optional[str] = ..., failing_checks_repeated: _Optional[int] = ..., price: _Optional[_Union[RunProgress.Price, _Mapping]] = ..., steer_request_ids: _Optional[_Iterable[str]] = ..., steers_waiting: _Optional[int] = ..., policy: _Optional[_Union[PolicyDecided, _Mapping]] = ...) -> None: ...

class Spend(_message.Message):
    __slots__ = ["cost_usd", "steps", "tokens", "tool_calls"]
    COST_USD_FIELD_NUMBER: _ClassVar[int]
    STEPS_FIELD_NUMBER: _ClassVar[int]
    TOKENS_FIELD_NUMBER: _ClassVar[int]
    TOOL_CALLS_FIELD_NUMBER: _ClassVar[int]
    cost_usd: float
    steps: int
    tokens: int
    tool_calls: int
    def __init__(self, steps: _Optional[int] = ..., tokens: _Optional[int] = ..., cost_usd: _Optional[float] = ..., tool_calls: _Optional[int] = ...) -> None: ...

class ToolDigest(_message.Message):
    __slots__ = ["digest", "name", "schema_digest", "server", "tier"]
    DIGEST_FIELD_NUMBER: _ClassVar[int]
    NAME_FIELD_NUMBER: _ClassVar[int]
    SCHEMA_DIGEST_FIELD_NUMBER: _ClassVar[int]
    SERVER_FIELD_NUMBER: _ClassVar[int]
    TIER_FIELD_NUMBER: _ClassVar[int]
    digest: str
    name: str
    schema_digest: str
    server: str
    tier: _contract_pb2.ToolTier
    def __init__(self, name: _Optional[str] = ..., digest: _Optional[str] = ..., tier: _Optional[_Union[_contract_pb2.ToolTier, str]] = ..., schema_digest: _Optional[str] = ..., server: _Optional[str] = ...) -> None: ...

class RunStatus(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = []

class PolicySource(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = []
