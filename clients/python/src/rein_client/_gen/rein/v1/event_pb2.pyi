from google.protobuf import duration_pb2 as _duration_pb2
from google.protobuf import struct_pb2 as _struct_pb2
from google.protobuf import timestamp_pb2 as _timestamp_pb2
from rein_client._gen.rein.v1 import contract_pb2 as _contract_pb2
from rein_client._gen.rein.v1 import decision_pb2 as _decision_pb2
from rein_client._gen.rein.v1 import run_pb2 as _run_pb2
from google.protobuf.internal import containers as _containers
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from typing import ClassVar as _ClassVar, Iterable as _Iterable, Mapping as _Mapping, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class ApprovalDecided(_message.Message):
    __slots__ = ["approved", "end_run", "proposal_id", "reason"]
    APPROVED_FIELD_NUMBER: _ClassVar[int]
    END_RUN_FIELD_NUMBER: _ClassVar[int]
    PROPOSAL_ID_FIELD_NUMBER: _ClassVar[int]
    REASON_FIELD_NUMBER: _ClassVar[int]
    approved: bool
    end_run: bool
    proposal_id: str
    reason: str
    def __init__(self, proposal_id: _Optional[str] = ..., approved: bool = ..., reason: _Optional[str] = ..., end_run: bool = ...) -> None: ...

class ApprovalGiven(_message.Message):
    __slots__ = ["given", "needed", "proposal_id"]
    GIVEN_FIELD_NUMBER: _ClassVar[int]
    NEEDED_FIELD_NUMBER: _ClassVar[int]
    PROPOSAL_ID_FIELD_NUMBER: _ClassVar[int]
    given: int
    needed: int
    proposal_id: str
    def __init__(self, proposal_id: _Optional[str] = ..., given: _Optional[int] = ..., needed: _Optional[int] = ...) -> None: ...

class ApprovalRequested(_message.Message):
    __slots__ = ["proposal"]
    PROPOSAL_FIELD_NUMBER: _ClassVar[int]
    proposal: _run_pb2.Proposal
    def __init__(self, proposal: _Optional[_Union[_run_pb2.Proposal, _Mapping]] = ...) -> None: ...

class ArgumentChange(_message.Message):
    __slots__ = ["after", "before", "path"]
    AFTER_FIELD_NUMBER: _ClassVar[int]
    BEFORE_FIELD_NUMBER: _ClassVar[int]
    PATH_FIELD_NUMBER: _ClassVar[int]
    after: _struct_pb2.Value
    before: _struct_pb2.Value
    path: str
    def __init__(self, path: _Optional[str] = ..., before: _Optional[_Union[_struct_pb2.Value, _Mapping]] = ..., after: _Optional[_Union[_struct_pb2.Value, _Mapping]] = ...) -> None: ...

class BudgetRaised(_message.Message):
    __slots__ = ["add_cost_usd", "add_steps", "add_tokens", "add_tool_calls", "budget", "child_run_id", "deadline", "extend_deadline", "reason"]
    ADD_COST_USD_FIELD_NUMBER: _ClassVar[int]
    ADD_STEPS_FIELD_NUMBER: _ClassVar[int]
    ADD_TOKENS_FIELD_NUMBER: _ClassVar[int]
    ADD_TOOL_CALLS_FIELD_NUMBER: _ClassVar[int]
    BUDGET_FIELD_NUMBER: _ClassVar[int]
    CHILD_RUN_ID_FIELD_NUMBER: _ClassVar[int]
    DEADLINE_FIELD_NUMBER: _ClassVar[int]
    EXTEND_DEADLINE_FIELD_NUMBER: _ClassVar[int]
    REASON_FIELD_NUMBER: _ClassVar[int]
    add_cost_usd: float
    add_steps: int
    add_tokens: int
    add_tool_calls: int
    budget: _contract_pb2.Budget
    child_run_id: str
    deadline: _timestamp_pb2.Timestamp
    extend_deadline: _duration_pb2.Duration
    reason: str
    def __init__(self, add_steps: _Optional[int] = ..., add_tokens: _Optional[int] = ..., add_cost_usd: _Optional[float] = ..., extend_deadline: _Optional[_Union[_duration_pb2.Duration, _Mapping]] = ..., budget: _Optional[_Union[_contract_pb2.Budget, _Mapping]] = ..., deadline: _Optional[_Union[_timestamp_pb2.Timestamp, _Mapping]] = ..., reason: _Optional[str] = ..., add_tool_calls: _Optional[int] = ..., child_run_id: _Optional[str] = ...) -> None: ...

class BudgetReached(_message.Message):
    __slots__ = ["child_run_id", "detail", "limit", "next_call_cost_usd", "next_call_tokens", "raise_by", "retry_past_deadline"]
    CHILD_RUN_ID_FIELD_NUMBER: _ClassVar[int]
    DETAIL_FIELD_NUMBER: _ClassVar[int]
    LIMIT_FIELD_NUMBER: _ClassVar[int]
    NEXT_CALL_COST_USD_FIELD_NUMBER: _ClassVar[int]
    NEXT_CALL_TOKENS_FIELD_NUMBER: _ClassVar[int]
    RAISE_BY_FIELD_NUMBER: _ClassVar[int]
    RETRY_PAST_DEADLINE_FIELD_NUMBER: _ClassVar[int]
    child_run_id: str
    detail: str
    limit: str
    next_call_cost_usd: float
    next_call_tokens: int
    raise_by: _timestamp_pb2.Timestamp
    retry_past_deadline: RetryPastDeadline
    def __init__(self, limit: _Optional[str] = ..., detail: _Optional[str] = ..., retry_past_deadline: _Optional[_Union[RetryPastDeadline, _Mapping]] = ..., raise_by: _Optional[_Union[_timestamp_pb2.Timestamp, _Mapping]] = ..., child_run_id: _Optional[str] = ..., next_call_tokens: _Optional[int] = ..., next_call_cost_usd: _Optional[float] = ...) -> None: ...

class CheckResult(_message.Message):
    __slots__ = ["exit_code", "name", "output_tail", "passed"]
    EXIT_CODE_FIELD_NUMBER: _ClassVar[int]
    NAME_FIELD_NUMBER: _ClassVar[int]
    OUTPUT_TAIL_FIELD_NUMBER: _ClassVar[int]
    PASSED_FIELD_NUMBER: _ClassVar[int]
    exit_code: int
    name: str
    output_tail: str
    passed: bool
    def __init__(self, name: _Optional[str] = ..., passed: bool = ..., exit_code: _Optional[int] = ..., output_tail: _Optional[str] = ...) -> None: ...

class ChecksCompleted(_message.Message):
    __slots__ = ["duration", "results", "workspace_hash"]
    DURATION_FIELD_NUMBER: _ClassVar[int]
    RESULTS_FIELD_NUMBER: _ClassVar[int]
    WORKSPACE_HASH_FIELD_NUMBER: _ClassVar[int]
    duration: _duration_pb2.Duration
    results: _containers.RepeatedCompositeFieldContainer[CheckResult]
    workspace_hash: str
    def __init__(self, results: _Optional[_Iterable[_Union[CheckResult, _Mapping]]] = ..., workspace_hash: _Optional[str] = ..., duration: _Optional[_Union[_duration_pb2.Duration, _Mapping]] = ...) -> None: ...

class ContextCompacted(_message.Message):
    __slots__ = ["chars_after", "chars_before", "compacted", "items", "step"]
    CHARS_AFTER_FIELD_NUMBER: _ClassVar[int]
    CHARS_BEFORE_FIELD_NUMBER: _ClassVar[int]
    COMPACTED_FIELD_NUMBER: _ClassVar[int]
    ITEMS_FIELD_NUMBER: _ClassVar[int]
    STEP_FIELD_NUMBER: _ClassVar[int]
    chars_after: int
    chars_before: int
    compacted: int
    items: _containers.RepeatedCompositeFieldContainer[ContextItem]
    step: int
    def __init__(self, step: _Optional[int] = ..., compacted: _Optional[int] = ..., items: _Optional[_Iterable[_Union[ContextItem, _Mapping]]] = ..., chars_before: _Optional[int] = ..., chars_after: _Optional[int] = ...) -> None: ...

class ContextItem(_message.Message):
    __slots__ = ["blob", "gist", "kind", "sequence", "source"]
    BLOB_FIELD_NUMBER: _ClassVar[int]
    GIST_FIELD_NUMBER: _ClassVar[int]
    KIND_FIELD_NUMBER: _ClassVar[int]
    SEQUENCE_FIELD_NUMBER: _ClassVar[int]
    SOURCE_FIELD_NUMBER: _ClassVar[int]
    blob: str
    gist: str
    kind: str
    sequence: int
    source: str
    def __init__(self, kind: _Optional[str] = ..., source: _Optional[str] = ..., gist: _Optional[str] = ..., blob: _Optional[str] = ..., sequence: _Optional[int] = ...) -> None: ...

class DecisionRejected(_message.Message):
    __slots__ = ["error", "raw"]
    ERROR_FIELD_NUMBER: _ClassVar[int]
    RAW_FIELD_NUMBER: _ClassVar[int]
    error: str
    raw: str
    def __init__(self, raw: _Optional[str] = ..., error: _Optional[str] = ...) -> None: ...

class DelegatedChild(_message.Message):
    __slots__ = ["budget", "contract", "request_id", "run_id"]
    BUDGET_FIELD_NUMBER: _ClassVar[int]
    CONTRACT_FIELD_NUMBER: _ClassVar[int]
    REQUEST_ID_FIELD_NUMBER: _ClassVar[int]
    RUN_ID_FIELD_NUMBER: _ClassVar[int]
    budget: _contract_pb2.Budget
    contract: _contract_pb2.TaskContract
    request_id: str
    run_id: str
    def __init__(self, run_id: _Optional[str] = ..., request_id: _Optional[str] = ..., budget: _Optional[_Union[_contract_pb2.Budget, _Mapping]] = ..., contract: _Optional[_Union[_contract_pb2.TaskContract, _Mapping]] = ...) -> None: ...

class DelegationReturned(_message.Message):
    __slots__ = ["answer", "cost_usd", "evidence", "reason", "run_id", "status", "steps", "tool_calls", "usage"]
    ANSWER_FIELD_NUMBER: _ClassVar[int]
    COST_USD_FIELD_NUMBER: _ClassVar[int]
    EVIDENCE_FIELD_NUMBER: _ClassVar[int]
    REASON_FIELD_NUMBER: _ClassVar[int]
    RUN_ID_FIELD_NUMBER: _ClassVar[int]
    STATUS_FIELD_NUMBER: _ClassVar[int]
    STEPS_FIELD_NUMBER: _ClassVar[int]
    TOOL_CALLS_FIELD_NUMBER: _ClassVar[int]
    USAGE_FIELD_NUMBER: _ClassVar[int]
    answer: _decision_pb2.FinalAnswer
    cost_usd: float
    evidence: _containers.RepeatedScalarFieldContainer[str]
    reason: str
    run_id: str
    status: _run_pb2.RunStatus
    steps: int
    tool_calls: int
    usage: _contract_pb2.Usage
    def __init__(self, run_id: _Optional[str] = ..., status: _Optional[_Union[_run_pb2.RunStatus, str]] = ..., reason: _Optional[str] = ..., answer: _Optional[_Union[_decision_pb2.FinalAnswer, _Mapping]] = ..., evidence: _Optional[_Iterable[str]] = ..., usage: _Optional[_Union[_contract_pb2.Usage, _Mapping]] = ..., cost_usd: _Optional[float] = ..., steps: _Optional[int] = ..., tool_calls: _Optional[int] = ...) -> None: ...

class DelegationStarted(_message.Message):
    __slots__ = ["call_id", "children"]
    CALL_ID_FIELD_NUMBER: _ClassVar[int]
    CHILDREN_FIELD_NUMBER: _ClassVar[int]
    call_id: str
    children: _containers.RepeatedCompositeFieldContainer[DelegatedChild]
    def __init__(self, call_id: _Optional[str] = ..., children: _Optional[_Iterable[_Union[DelegatedChild, _Mapping]]] = ...) -> None: ...

class Event(_message.Message):
    __slots__ = ["actor", "approval_decided", "approval_given", "approval_requested", "budget_raised", "budget_reached", "checks_completed", "context_compacted", "decision_rejected", "delegation_returned", "delegation_started", "input_provided", "input_requested", "model_requested", "model_retried", "model_returned", "model_throttled", "policy_decided", "proposal_revised", "recorded_at", "run_admitted", "run_id", "run_started", "run_steered", "run_taken", "sequence", "status_changed", "tool_adopted", "tool_changed", "tool_refused", "tool_requested", "tool_returned", "write_committed", "write_dispatched", "write_outcome_unknown", "write_refused"]
    ACTOR_FIELD_NUMBER: _ClassVar[int]
    APPROVAL_DECIDED_FIELD_NUMBER: _ClassVar[int]
    APPROVAL_GIVEN_FIELD_NUMBER: _ClassVar[int]
    APPROVAL_REQUESTED_FIELD_NUMBER: _ClassVar[int]
    BUDGET_RAISED_FIELD_NUMBER: _ClassVar[int]
    BUDGET_REACHED_FIELD_NUMBER: _ClassVar[int]
    CHECKS_COMPLETED_FIELD_NUMBER: _ClassVar[int]
    CONTEXT_COMPACTED_FIELD_NUMBER: _ClassVar[int]
    DECISION_REJECTED_FIELD_NUMBER: _ClassVar[int]
    DELEGATION_RETURNED_FIELD_NUMBER: _ClassVar[int]
    DELEGATION_STARTED_FIELD_NUMBER: _ClassVar[int]
    INPUT_PROVIDED_FIELD_NUMBER: _ClassVar[int]
    INPUT_REQUESTED_FIELD_NUMBER: _ClassVar[int]
    MODEL_REQUESTED_FIELD_NUMBER: _ClassVar[int]
    MODEL_RETRIED_FIELD_NUMBER: _ClassVar[int]
    MODEL_RETURNED_FIELD_NUMBER: _ClassVar[int]
    MODEL_THROTTLED_FIELD_NUMBER: _ClassVar[int]
    POLICY_DECIDED_FIELD_NUMBER: _ClassVar[int]
    PROPOSAL_REVISED_FIELD_NUMBER: _ClassVar[int]
    RECORDED_AT_FIELD_NUMBER: _ClassVar[int]
    RUN_ADMITTED_FIELD_NUMBER: _ClassVar[int]
    RUN_ID_FIELD_NUMBER: _ClassVar[int]
    RUN_STARTED_FIELD_NUMBER: _ClassVar[int]
    RUN_STEERED_FIELD_NUMBER: _ClassVar[int]
    RUN_TAKEN_FIELD_NUMBER: _ClassVar[int]
    SEQUENCE_FIELD_NUMBER: _ClassVar[int]
    STATUS_CHANGED_FIELD_NUMBER: _ClassVar[int]
    TOOL_ADOPTED_FIELD_NUMBER: _ClassVar[int]
    TOOL_CHANGED_FIELD_NUMBER: _ClassVar[int]
    TOOL_REFUSED_FIELD_NUMBER: _ClassVar[int]
    TOOL_REQUESTED_FIELD_NUMBER: _ClassVar[int]
    TOOL_RETURNED_FIELD_NUMBER: _ClassVar[int]
    WRITE_COMMITTED_FIELD_NUMBER: _ClassVar[int]
    WRITE_DISPATCHED_FIELD_NUMBER: _ClassVar[int]
    WRITE_OUTCOME_UNKNOWN_FIELD_NUMBER: _ClassVar[int]
    WRITE_REFUSED_FIELD_NUMBER: _ClassVar[int]
    actor: str
    approval_decided: ApprovalDecided
    approval_given: ApprovalGiven
    approval_requested: ApprovalRequested
    budget_raised: BudgetRaised
    budget_reached: BudgetReached
    checks_completed: ChecksCompleted
    context_compacted: ContextCompacted
    decision_rejected: DecisionRejected
    delegation_returned: DelegationReturned
    delegation_started: DelegationStarted
    input_provided: InputProvided
    input_requested: InputRequested
    model_requested: ModelRequested
    model_retried: ModelRetried
    model_returned: ModelReturned
    model_throttled: ModelThrottled
    policy_decided: _run_pb2.PolicyDecided
    proposal_revised: ProposalRevised
    recorded_at: _timestamp_pb2.Timestamp
    run_admitted: RunAdmitted
    run_id: str
    run_started: RunStarted
    run_steered: RunSteered
    run_taken: RunTaken
    sequence: int
    status_changed: StatusChanged
    tool_adopted: ToolAdopted
    tool_changed: ToolChanged
    tool_refused: ToolRefused
    tool_requested: ToolRequested
    tool_returned: ToolReturned
    write_committed: WriteCommitted
    write_dispatched: WriteDispatched
    write_outcome_unknown: WriteOutcomeUnknown
    write_refused: WriteRefused
    def __init__(self, run_id: _Optional[str] = ..., sequence: _Optional[int] = ..., recorded_at: _Optional[_Union[_timestamp_pb2.Timestamp, _Mapping]] = ..., actor: _Optional[str] = ..., run_started: _Optional[_Union[RunStarted, _Mapping]] = ..., model_requested: _Optional[_Union[ModelRequested, _Mapping]] = ..., model_returned: _Optional[_Union[ModelReturned, _Mapping]] = ..., decision_rejected: _Optional[_Union[DecisionRejected, _Mapping]] = ..., tool_requested: _Optional[_Union[ToolRequested, _Mapping]] = ..., tool_refused: _Optional[_Union[ToolRefused, _Mapping]] = ..., tool_returned: _Optional[_Union[ToolReturned, _Mapping]] = ..., approval_requested: _Optional[_Union[ApprovalRequested, _Mapping]] = ..., approval_decided: _Optional[_Union[ApprovalDecided, _Mapping]] = ..., input_requested: _Optional[_Union[InputRequested, _Mapping]] = ..., input_provided: _Optional[_Union[InputProvided, _Mapping]] = ..., write_dispatched: _Optional[_Union[WriteDispatched, _Mapping]] = ..., write_committed: _Optional[_Union[WriteCommitted, _Mapping]] = ..., write_outcome_unknown: _Optional[_Union[WriteOutcomeUnknown, _Mapping]] = ..., checks_completed: _Optional[_Union[ChecksCompleted, _Mapping]] = ..., budget_reached: _Optional[_Union[BudgetReached, _Mapping]] = ..., status_changed: _Optional[_Union[StatusChanged, _Mapping]] = ..., model_retried: _Optional[_Union[ModelRetried, _Mapping]] = ..., context_compacted: _Optional[_Union[ContextCompacted, _Mapping]] = ..., write_refused: _Optional[_Union[WriteRefused, _Mapping]] = ..., delegation_started: _Optional[_Union[DelegationStarted, _Mapping]] = ..., delegation_returned: _Optional[_Union[DelegationReturned, _Mapping]] = ..., run_steered: _Optional[_Union[RunSteered, _Mapping]] = ..., budget_raised: _Optional[_Union[BudgetRaised, _Mapping]] = ..., proposal_revised: _Optional[_Union[ProposalRevised, _Mapping]] = ..., policy_decided: _Optional[_Union[_run_pb2.PolicyDecided, _Mapping]] = ..., approval_given: _Optional[_Union[ApprovalGiven, _Mapping]] = ..., run_admitted: _Optional[_Union[RunAdmitted, _Mapping]] = ..., model_throttled: _Optional[_Union[ModelThrottled, _Mapping]] = ..., run_taken: _Optional[_Union[RunTaken, _Mapping]] = ..., tool_changed: _Optional[_Union[ToolChanged, _Mapping]] = ..., tool_adopted: _Optional[_Union[ToolAdopted, _Mapping]] = ...) -> None: ...

class InputProvided(_message.Message):
    __slots__ = ["text"]
    TEXT_FIELD_NUMBER: _ClassVar[int]
    text: str
    def __init__(self, text: _Optional[str] = ...) -> None: ...

class InputRequested(_message.Message):
    __slots__ = ["question"]
    QUESTION_FIELD_NUMBER: _ClassVar[int]
    question: _run_pb2.Question
    def __init__(self, question: _Optional[_Union[_run_pb2.Question, _Mapping]] = ...) -> None: ...

class ModelPrice(_message.Message):
    __slots__ = ["cache_read_per_mtok", "cache_write_per_mtok", "input_per_mtok", "output_per_mtok"]
    CACHE_READ_PER_MTOK_FIELD_NUMBER: _ClassVar[int]
    CACHE_WRITE_PER_MTOK_FIELD_NUMBER: _ClassVar[int]
    INPUT_PER_MTOK_FIELD_NUMBER: _ClassVar[int]
    OUTPUT_PER_MTOK_FIELD_NUMBER: _ClassVar[int]
    cache_read_per_mtok: float
    cache_write_per_mtok: float
    input_per_mtok: float
    output_per_mtok: float
    def __init__(self, input_per_mtok: _Optional[float] = ..., output_per_mtok: _Optional[float] = ..., cache_write_per_mtok: _Optional[float] = ..., cache_read_per_mtok: _Optional[float] = ...) -> None: ...

class ModelRequested(_message.Message):
    __slots__ = ["cache_breakpoints", "cache_ttl", "carried_blobs", "input_blobs", "input_hash", "input_tokens", "max_cost_usd", "max_output_tokens", "model", "prefix_bytes", "prefix_tokens", "price", "prompt_version", "resumed", "step", "tool_set_hash"]
    CACHE_BREAKPOINTS_FIELD_NUMBER: _ClassVar[int]
    CACHE_TTL_FIELD_NUMBER: _ClassVar[int]
    CARRIED_BLOBS_FIELD_NUMBER: _ClassVar[int]
    INPUT_BLOBS_FIELD_NUMBER: _ClassVar[int]
    INPUT_HASH_FIELD_NUMBER: _ClassVar[int]
    INPUT_TOKENS_FIELD_NUMBER: _ClassVar[int]
    MAX_COST_USD_FIELD_NUMBER: _ClassVar[int]
    MAX_OUTPUT_TOKENS_FIELD_NUMBER: _ClassVar[int]
    MODEL_FIELD_NUMBER: _ClassVar[int]
    PREFIX_BYTES_FIELD_NUMBER: _ClassVar[int]
    PREFIX_TOKENS_FIELD_NUMBER: _ClassVar[int]
    PRICE_FIELD_NUMBER: _ClassVar[int]
    PROMPT_VERSION_FIELD_NUMBER: _ClassVar[int]
    RESUMED_FIELD_NUMBER: _ClassVar[int]
    STEP_FIELD_NUMBER: _ClassVar[int]
    TOOL_SET_HASH_FIELD_NUMBER: _ClassVar[int]
    cache_breakpoints: _containers.RepeatedScalarFieldContainer[int]
    cache_ttl: _duration_pb2.Duration
    carried_blobs: int
    input_blobs: _containers.RepeatedScalarFieldContainer[str]
    input_hash: str
    input_tokens: int
    max_cost_usd: float
    max_output_tokens: int
    model: str
    prefix_bytes: int
    prefix_tokens: int
    price: ModelPrice
    prompt_version: str
    resumed: bool
    step: int
    tool_set_hash: str
    def __init__(self, step: _Optional[int] = ..., input_hash: _Optional[str] = ..., input_tokens: _Optional[int] = ..., max_output_tokens: _Optional[int] = ..., model: _Optional[str] = ..., prompt_version: _Optional[str] = ..., tool_set_hash: _Optional[str] = ..., resumed: bool = ..., input_blobs: _Optional[_Iterable[str]] = ..., max_cost_usd: _Optional[float] = ..., carried_blobs: _Optional[int] = ..., price: _Optional[_Union[ModelPrice, _Mapping]] = ..., prefix_bytes: _Optional[int] = ..., prefix_tokens: _Optional[int] = ..., cache_breakpoints: _Optional[_Iterable[int]] = ..., cache_ttl: _Optional[_Union[_duration_pb2.Duration, _Mapping]] = ...) -> None: ...

class ModelRetried(_message.Message):
    __slots__ = ["error", "reason", "step", "wait"]
    ERROR_FIELD_NUMBER: _ClassVar[int]
    REASON_FIELD_NUMBER: _ClassVar[int]
    STEP_FIELD_NUMBER: _ClassVar[int]
    WAIT_FIELD_NUMBER: _ClassVar[int]
    error: str
    reason: str
    step: int
    wait: _duration_pb2.Duration
    def __init__(self, step: _Optional[int] = ..., error: _Optional[str] = ..., wait: _Optional[_Union[_duration_pb2.Duration, _Mapping]] = ..., reason: _Optional[str] = ...) -> None: ...

class ModelReturned(_message.Message):
    __slots__ = ["cost_usd", "decision", "duration", "finish_reason", "response_id", "usage"]
    COST_USD_FIELD_NUMBER: _ClassVar[int]
    DECISION_FIELD_NUMBER: _ClassVar[int]
    DURATION_FIELD_NUMBER: _ClassVar[int]
    FINISH_REASON_FIELD_NUMBER: _ClassVar[int]
    RESPONSE_ID_FIELD_NUMBER: _ClassVar[int]
    USAGE_FIELD_NUMBER: _ClassVar[int]
    cost_usd: float
    decision: _decision_pb2.Decision
    duration: _duration_pb2.Duration
    finish_reason: str
    response_id: str
    usage: _contract_pb2.Usage
    def __init__(self, decision: _Optional[_Union[_decision_pb2.Decision, _Mapping]] = ..., usage: _Optional[_Union[_contract_pb2.Usage, _Mapping]] = ..., cost_usd: _Optional[float] = ..., duration: _Optional[_Union[_duration_pb2.Duration, _Mapping]] = ..., response_id: _Optional[str] = ..., finish_reason: _Optional[str] = ...) -> None: ...

class ModelThrottled(_message.Message):
    __slots__ = ["bucket", "step", "wait"]
    BUCKET_FIELD_NUMBER: _ClassVar[int]
    STEP_FIELD_NUMBER: _ClassVar[int]
    WAIT_FIELD_NUMBER: _ClassVar[int]
    bucket: str
    step: int
    wait: _duration_pb2.Duration
    def __init__(self, step: _Optional[int] = ..., wait: _Optional[_Union[_duration_pb2.Duration, _Mapping]] = ..., bucket: _Optional[str] = ...) -> None: ...

class ProposalRevised(_message.Message):
    __slots__ = ["changes", "proposal", "reason", "superseded_proposal_id"]
    CHANGES_FIELD_NUMBER: _ClassVar[int]
    PROPOSAL_FIELD_NUMBER: _ClassVar[int]
    REASON_FIELD_NUMBER: _ClassVar[int]
    SUPERSEDED_PROPOSAL_ID_FIELD_NUMBER: _ClassVar[int]
    changes: _containers.RepeatedCompositeFieldContainer[ArgumentChange]
    proposal: _run_pb2.Proposal
    reason: str
    superseded_proposal_id: str
    def __init__(self, superseded_proposal_id: _Optional[str] = ..., proposal: _Optional[_Union[_run_pb2.Proposal, _Mapping]] = ..., changes: _Optional[_Iterable[_Union[ArgumentChange, _Mapping]]] = ..., reason: _Optional[str] = ...) -> None: ...

class RetryPastDeadline(_message.Message):
    __slots__ = ["error", "step", "wait"]
    ERROR_FIELD_NUMBER: _ClassVar[int]
    STEP_FIELD_NUMBER: _ClassVar[int]
    WAIT_FIELD_NUMBER: _ClassVar[int]
    error: str
    step: int
    wait: _duration_pb2.Duration
    def __init__(self, step: _Optional[int] = ..., error: _Optional[str] = ..., wait: _Optional[_Union[_duration_pb2.Duration, _Mapping]] = ...) -> None: ...

class RunAdmitted(_message.Message):
    __slots__ = ["by", "deadline", "waited"]
    BY_FIELD_NUMBER: _ClassVar[int]
    DEADLINE_FIELD_NUMBER: _ClassVar[int]
    WAITED_FIELD_NUMBER: _ClassVar[int]
    by: str
    deadline: _timestamp_pb2.Timestamp
    waited: _duration_pb2.Duration
    def __init__(self, waited: _Optional[_Union[_duration_pb2.Duration, _Mapping]] = ..., deadline: _Optional[_Union[_timestamp_pb2.Timestamp, _Mapping]] = ..., by: _Optional[str] = ...) -> None: ...

class RunStarted(_message.Message):
    __slots__ = ["contract", "deadline", "delegated_by", "parent_run_id", "parent_sequence", "policy_digest", "principal", "prompt_cache_key", "queued", "request_id", "tenant", "tool_digests", "trace_id", "trace_parent_span_id"]
    CONTRACT_FIELD_NUMBER: _ClassVar[int]
    DEADLINE_FIELD_NUMBER: _ClassVar[int]
    DELEGATED_BY_FIELD_NUMBER: _ClassVar[int]
    PARENT_RUN_ID_FIELD_NUMBER: _ClassVar[int]
    PARENT_SEQUENCE_FIELD_NUMBER: _ClassVar[int]
    POLICY_DIGEST_FIELD_NUMBER: _ClassVar[int]
    PRINCIPAL_FIELD_NUMBER: _ClassVar[int]
    PROMPT_CACHE_KEY_FIELD_NUMBER: _ClassVar[int]
    QUEUED_FIELD_NUMBER: _ClassVar[int]
    REQUEST_ID_FIELD_NUMBER: _ClassVar[int]
    TENANT_FIELD_NUMBER: _ClassVar[int]
    TOOL_DIGESTS_FIELD_NUMBER: _ClassVar[int]
    TRACE_ID_FIELD_NUMBER: _ClassVar[int]
    TRACE_PARENT_SPAN_ID_FIELD_NUMBER: _ClassVar[int]
    contract: _contract_pb2.TaskContract
    deadline: _timestamp_pb2.Timestamp
    delegated_by: _run_pb2.DelegatedBy
    parent_run_id: str
    parent_sequence: int
    policy_digest: str
    principal: str
    prompt_cache_key: str
    queued: bool
    request_id: str
    tenant: str
    tool_digests: _containers.RepeatedCompositeFieldContainer[_run_pb2.ToolDigest]
    trace_id: str
    trace_parent_span_id: str
    def __init__(self, contract: _Optional[_Union[_contract_pb2.TaskContract, _Mapping]] = ..., principal: _Optional[str] = ..., tenant: _Optional[str] = ..., request_id: _Optional[str] = ..., deadline: _Optional[_Union[_timestamp_pb2.Timestamp, _Mapping]] = ..., parent_run_id: _Optional[str] = ..., parent_sequence: _Optional[int] = ..., trace_id: _Optional[str] = ..., trace_parent_span_id: _Optional[str] = ..., delegated_by: _Optional[_Union[_run_pb2.DelegatedBy, _Mapping]] = ..., queued: bool = ..., prompt_cache_key: _Optional[str] = ..., tool_digests: _Optional[_Iterable[_Union[_run_pb2.ToolDigest, _Mapping]]] = ..., policy_digest: _Optional[str] = ...) -> None: ...

class RunSteered(_message.Message):
    __slots__ = ["request_id", "text"]
    REQUEST_ID_FIELD_NUMBER: _ClassVar[int]
    TEXT_FIELD_NUMBER: _ClassVar[int]
    request_id: str
    text: str
    def __init__(self, text: _Optional[str] = ..., request_id: _Optional[str] = ...) -> None: ...

class RunTaken(_message.Message):
    __slots__ = ["epoch", "owner", "trace_id"]
    EPOCH_FIELD_NUMBER: _ClassVar[int]
    OWNER_FIELD_NUMBER: _ClassVar[int]
    TRACE_ID_FIELD_NUMBER: _ClassVar[int]
    epoch: int
    owner: str
    trace_id: str
    def __init__(self, owner: _Optional[str] = ..., epoch: _Optional[int] = ..., trace_id: _Optional[str] = ...) -> None: ...

class StatusChanged(_message.Message):
    __slots__ = ["error", "reason", "result", "to"]
    ERROR_FIELD_NUMBER: _ClassVar[int]
    FROM_FIELD_NUMBER: _ClassVar[int]
    REASON_FIELD_NUMBER: _ClassVar[int]
    RESULT_FIELD_NUMBER: _ClassVar[int]
    TO_FIELD_NUMBER: _ClassVar[int]
    error: str
    reason: str
    result: _decision_pb2.FinalAnswer
    to: _run_pb2.RunStatus
    def __init__(self, to: _Optional[_Union[_run_pb2.RunStatus, str]] = ..., reason: _Optional[str] = ..., result: _Optional[_Union[_decision_pb2.FinalAnswer, _Mapping]] = ..., error: _Optional[str] = ..., **kwargs) -> None: ...

class ToolAdopted(_message.Message):
    __slots__ = ["adopted", "by", "changes", "held", "tool"]
    ADOPTED_FIELD_NUMBER: _ClassVar[int]
    BY_FIELD_NUMBER: _ClassVar[int]
    CHANGES_FIELD_NUMBER: _ClassVar[int]
    HELD_FIELD_NUMBER: _ClassVar[int]
    TOOL_FIELD_NUMBER: _ClassVar[int]
    adopted: _run_pb2.ToolDigest
    by: str
    changes: _containers.RepeatedScalarFieldContainer[str]
    held: _run_pb2.ToolDigest
    tool: str
    def __init__(self, tool: _Optional[str] = ..., held: _Optional[_Union[_run_pb2.ToolDigest, _Mapping]] = ..., adopted: _Optional[_Union[_run_pb2.ToolDigest, _Mapping]] = ..., changes: _Optional[_Iterable[str]] = ..., by: _Optional[str] = ...) -> None: ...

class ToolChanged(_message.Message):
    __slots__ = ["action", "call_id", "changes", "found", "held", "proposal_id", "tool"]
    ACTION_FIELD_NUMBER: _ClassVar[int]
    CALL_ID_FIELD_NUMBER: _ClassVar[int]
    CHANGES_FIELD_NUMBER: _ClassVar[int]
    FOUND_FIELD_NUMBER: _ClassVar[int]
    HELD_FIELD_NUMBER: _ClassVar[int]
    PROPOSAL_ID_FIELD_NUMBER: _ClassVar[int]
    TOOL_FIELD_NUMBER: _ClassVar[int]
    action: str
    call_id: str
    changes: _containers.RepeatedScalarFieldContainer[str]
    found: _run_pb2.ToolDigest
    held: _run_pb2.ToolDigest
    proposal_id: str
    tool: str
    def __init__(self, tool: _Optional[str] = ..., held: _Optional[_Union[_run_pb2.ToolDigest, _Mapping]] = ..., found: _Optional[_Union[_run_pb2.ToolDigest, _Mapping]] = ..., changes: _Optional[_Iterable[str]] = ..., action: _Optional[str] = ..., call_id: _Optional[str] = ..., proposal_id: _Optional[str] = ...) -> None: ...

class ToolRefused(_message.Message):
    __slots__ = ["call_id", "reason", "tool"]
    CALL_ID_FIELD_NUMBER: _ClassVar[int]
    REASON_FIELD_NUMBER: _ClassVar[int]
    TOOL_FIELD_NUMBER: _ClassVar[int]
    call_id: str
    reason: str
    tool: str
    def __init__(self, call_id: _Optional[str] = ..., tool: _Optional[str] = ..., reason: _Optional[str] = ...) -> None: ...

class ToolRequested(_message.Message):
    __slots__ = ["arguments", "call_id", "tier", "tool"]
    ARGUMENTS_FIELD_NUMBER: _ClassVar[int]
    CALL_ID_FIELD_NUMBER: _ClassVar[int]
    TIER_FIELD_NUMBER: _ClassVar[int]
    TOOL_FIELD_NUMBER: _ClassVar[int]
    arguments: _struct_pb2.Struct
    call_id: str
    tier: _contract_pb2.ToolTier
    tool: str
    def __init__(self, call_id: _Optional[str] = ..., tool: _Optional[str] = ..., arguments: _Optional[_Union[_struct_pb2.Struct, _Mapping]] = ..., tier: _Optional[_Union[_contract_pb2.ToolTier, str]] = ...) -> None: ...

class ToolReturned(_message.Message):
    __slots__ = ["call_id", "duration", "error", "output", "output_bytes", "tool", "truncated"]
    CALL_ID_FIELD_NUMBER: _ClassVar[int]
    DURATION_FIELD_NUMBER: _ClassVar[int]
    ERROR_FIELD_NUMBER: _ClassVar[int]
    OUTPUT_BYTES_FIELD_NUMBER: _ClassVar[int]
    OUTPUT_FIELD_NUMBER: _ClassVar[int]
    TOOL_FIELD_NUMBER: _ClassVar[int]
    TRUNCATED_FIELD_NUMBER: _ClassVar[int]
    call_id: str
    duration: _duration_pb2.Duration
    error: str
    output: _struct_pb2.Value
    output_bytes: int
    tool: str
    truncated: bool
    def __init__(self, call_id: _Optional[str] = ..., tool: _Optional[str] = ..., output: _Optional[_Union[_struct_pb2.Value, _Mapping]] = ..., error: _Optional[str] = ..., truncated: bool = ..., output_bytes: _Optional[int] = ..., duration: _Optional[_Union[_duration_pb2.Duration, _Mapping]] = ...) -> None: ...

class WriteCommitted(_message.Message):
    __slots__ = ["duration", "operation_id", "proposal_id", "receipt"]
    DURATION_FIELD_NUMBER: _ClassVar[int]
    OPERATION_ID_FIELD_NUMBER: _ClassVar[int]
    PROPOSAL_ID_FIELD_NUMBER: _ClassVar[int]
    RECEIPT_FIELD_NUMBER: _ClassVar[int]
    duration: _duration_pb2.Duration
    operation_id: str
    proposal_id: str
    receipt: _struct_pb2.Value
    def __init__(self, proposal_id: _Optional[str] = ..., operation_id: _Optional[str] = ..., receipt: _Optional[_Union[_struct_pb2.Value, _Mapping]] = ..., duration: _Optional[_Union[_duration_pb2.Duration, _Mapping]] = ...) -> None: ...

class WriteDispatched(_message.Message):
    __slots__ = ["operation_id", "proposal_id"]
    OPERATION_ID_FIELD_NUMBER: _ClassVar[int]
    PROPOSAL_ID_FIELD_NUMBER: _ClassVar[int]
    operation_id: str
    proposal_id: str
    def __init__(self, proposal_id: _Optional[str] = ..., operation_id: _Optional[str] = ...) -> None: ...

class WriteOutcomeUnknown(_message.Message):
    __slots__ = ["error", "operation_id", "proposal_id"]
    ERROR_FIELD_NUMBER: _ClassVar[int]
    OPERATION_ID_FIELD_NUMBER: _ClassVar[int]
    PROPOSAL_ID_FIELD_NUMBER: _ClassVar[int]
    error: str
    operation_id: str
    proposal_id: str
    def __init__(self, proposal_id: _Optional[str] = ..., operation_id: _Optional[str] = ..., error: _Optional[str] = ...) -> None: ...

class WriteRefused(_message.Message):
    __slots__ = ["operation_id", "proposal_id", "reason"]
    OPERATION_ID_FIELD_NUMBER: _ClassVar[int]
    PROPOSAL_ID_FIELD_NUMBER: _ClassVar[int]
    REASON_FIELD_NUMBER: _ClassVar[int]
    operation_id: str
    proposal_id: str
    reason: str
    def __init__(self, proposal_id: _Optional[str] = ..., operation_id: _Optional[str] = ..., reason: _Optional[str] = ...) -> None: ...
