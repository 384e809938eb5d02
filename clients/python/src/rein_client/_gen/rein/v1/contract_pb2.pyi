from rein_client._gen.buf.validate import validate_pb2 as _validate_pb2
from google.protobuf import duration_pb2 as _duration_pb2
from google.protobuf import struct_pb2 as _struct_pb2
from rein_client._gen.rein.v1 import decision_pb2 as _decision_pb2
from google.protobuf.internal import containers as _containers
from google.protobuf.internal import enum_type_wrapper as _enum_type_wrapper
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from typing import ClassVar as _ClassVar, Iterable as _Iterable, Mapping as _Mapping, Optional as _Optional, Union as _Union

BUDGET_ACTION_END: BudgetAction
BUDGET_ACTION_PAUSE: BudgetAction
BUDGET_ACTION_UNSPECIFIED: BudgetAction
DESCRIPTOR: _descriptor.FileDescriptor
POLICY_EFFECT_ALLOW: PolicyEffect
POLICY_EFFECT_ASK: PolicyEffect
POLICY_EFFECT_DENY: PolicyEffect
POLICY_EFFECT_UNSPECIFIED: PolicyEffect
TOOL_TIER_ASK_HUMAN: ToolTier
TOOL_TIER_READ: ToolTier
TOOL_TIER_UNSPECIFIED: ToolTier
TOOL_TIER_WRITE: ToolTier

class ApprovalPolicy(_message.Message):
    __slots__ = ["forbid_self_approval", "proposal_ttl"]
    FORBID_SELF_APPROVAL_FIELD_NUMBER: _ClassVar[int]
    PROPOSAL_TTL_FIELD_NUMBER: _ClassVar[int]
    forbid_self_approval: bool
    proposal_ttl: _duration_pb2.Duration
    def __init__(self, proposal_ttl: _Optional[_Union[_duration_pb2.Duration, _Mapping]] = ..., forbid_self_approval: bool = ...) -> None: ...

class Budget(_message.Message):
    __slots__ = ["max_context_chars", "max_cost_usd", "max_output_bytes", "max_steps", "max_tokens", "max_tool_calls", "on_exhausted", "raise_ttl", "timeout", "timeout_from_submission"]
    MAX_CONTEXT_CHARS_FIELD_NUMBER: _ClassVar[int]
    MAX_COST_USD_FIELD_NUMBER: _ClassVar[int]
    MAX_OUTPUT_BYTES_FIELD_NUMBER: _ClassVar[int]
    MAX_STEPS_FIELD_NUMBER: _ClassVar[int]
    MAX_TOKENS_FIELD_NUMBER: _ClassVar[int]
    MAX_TOOL_CALLS_FIELD_NUMBER: _ClassVar[int]
    ON_EXHAUSTED_FIELD_NUMBER: _ClassVar[int]
    RAISE_TTL_FIELD_NUMBER: _ClassVar[int]
    TIMEOUT_FIELD_NUMBER: _ClassVar[int]
    TIMEOUT_FROM_SUBMISSION_FIELD_NUMBER: _ClassVar[int]
    max_context_chars: int
    max_cost_usd: float
    max_output_bytes: int
    max_steps: int
    max_tokens: int
    max_tool_calls: int
    on_exhausted: BudgetAction
    raise_ttl: _duration_pb2.Duration
    timeout: _duration_pb2.Duration
    timeout_from_submission: bool
    def __init__(self, max_steps: _Optional[int] = ..., max_tokens: _Optional[int] = ..., timeout: _Optional[_Union[_duration_pb2.Duration, _Mapping]] = ..., max_tool_calls: _Optional[int] = ..., max_output_bytes: _Optional[int] = ..., max_cost_usd: _Optional[float] = ..., max_context_chars: _Optional[int] = ..., on_exhausted: _Optional[_Union[BudgetAction, str]] = ..., raise_ttl: _Optional[_Union[_duration_pb2.Duration, _Mapping]] = ..., timeout_from_submission: bool = ...) -> None: ...

class Check(_message.Message):
    __slots__ = ["argv", "dir", "env", "name", "timeout"]
    ARGV_FIELD_NUMBER: _ClassVar[int]
    DIR_FIELD_NUMBER: _ClassVar[int]
    ENV_FIELD_NUMBER: _ClassVar[int]
    NAME_FIELD_NUMBER: _ClassVar[int]
    TIMEOUT_FIELD_NUMBER: _ClassVar[int]
    argv: _containers.RepeatedScalarFieldContainer[str]
    dir: str
    env: _containers.RepeatedScalarFieldContainer[str]
    name: str
    timeout: _duration_pb2.Duration
    def __init__(self, name: _Optional[str] = ..., argv: _Optional[_Iterable[str]] = ..., dir: _Optional[str] = ..., timeout: _Optional[_Union[_duration_pb2.Duration, _Mapping]] = ..., env: _Optional[_Iterable[str]] = ...) -> None: ...

class DelegationPolicy(_message.Message):
    __slots__ = ["child_models", "max_children", "max_depth", "max_share", "tools"]
    CHILD_MODELS_FIELD_NUMBER: _ClassVar[int]
    MAX_CHILDREN_FIELD_NUMBER: _ClassVar[int]
    MAX_DEPTH_FIELD_NUMBER: _ClassVar[int]
    MAX_SHARE_FIELD_NUMBER: _ClassVar[int]
    TOOLS_FIELD_NUMBER: _ClassVar[int]
    child_models: _containers.RepeatedCompositeFieldContainer[ModelSpec]
    max_children: int
    max_depth: int
    max_share: float
    tools: _containers.RepeatedScalarFieldContainer[str]
    def __init__(self, max_children: _Optional[int] = ..., max_depth: _Optional[int] = ..., tools: _Optional[_Iterable[str]] = ..., max_share: _Optional[float] = ..., child_models: _Optional[_Iterable[_Union[ModelSpec, _Mapping]]] = ...) -> None: ...

class ModelSpec(_message.Message):
    __slots__ = ["base_url", "max_output_tokens", "name", "provider", "script", "temperature"]
    BASE_URL_FIELD_NUMBER: _ClassVar[int]
    MAX_OUTPUT_TOKENS_FIELD_NUMBER: _ClassVar[int]
    NAME_FIELD_NUMBER: _ClassVar[int]
    PROVIDER_FIELD_NUMBER: _ClassVar[int]
    SCRIPT_FIELD_NUMBER: _ClassVar[int]
    TEMPERATURE_FIELD_NUMBER: _ClassVar[int]
    base_url: str
    max_output_tokens: int
    name: str
    provider: str
    script: _containers.RepeatedCompositeFieldContainer[ScriptedReply]
    temperature: float
    def __init__(self, provider: _Optional[str] = ..., name: _Optional[str] = ..., base_url: _Optional[str] = ..., max_output_tokens: _Optional[int] = ..., temperature: _Optional[float] = ..., script: _Optional[_Iterable[_Union[ScriptedReply, _Mapping]]] = ...) -> None: ...

class PolicyRule(_message.Message):
    __slots__ = ["approvals", "effect", "message", "name", "when"]
    APPROVALS_FIELD_NUMBER: _ClassVar[int]
    EFFECT_FIELD_NUMBER: _ClassVar[int]
    MESSAGE_FIELD_NUMBER: _ClassVar[int]
    NAME_FIELD_NUMBER: _ClassVar[int]
    WHEN_FIELD_NUMBER: _ClassVar[int]
    approvals: int
    effect: PolicyEffect
    message: str
    name: str
    when: str
    def __init__(self, name: _Optional[str] = ..., effect: _Optional[_Union[PolicyEffect, str]] = ..., when: _Optional[str] = ..., message: _Optional[str] = ..., approvals: _Optional[int] = ...) -> None: ...

class ScriptedChunk(_message.Message):
    __slots__ = ["delay_ms", "text"]
    DELAY_MS_FIELD_NUMBER: _ClassVar[int]
    TEXT_FIELD_NUMBER: _ClassVar[int]
    delay_ms: int
    text: str
    def __init__(self, text: _Optional[str] = ..., delay_ms: _Optional[int] = ...) -> None: ...

class ScriptedReply(_message.Message):
    __slots__ = ["chunks", "decision", "delay_ms", "error", "fail_attempts", "raw", "retry_after_ms", "usage"]
    CHUNKS_FIELD_NUMBER: _ClassVar[int]
    DECISION_FIELD_NUMBER: _ClassVar[int]
    DELAY_MS_FIELD_NUMBER: _ClassVar[int]
    ERROR_FIELD_NUMBER: _ClassVar[int]
    FAIL_ATTEMPTS_FIELD_NUMBER: _ClassVar[int]
    RAW_FIELD_NUMBER: _ClassVar[int]
    RETRY_AFTER_MS_FIELD_NUMBER: _ClassVar[int]
    USAGE_FIELD_NUMBER: _ClassVar[int]
    chunks: _containers.RepeatedCompositeFieldContainer[ScriptedChunk]
    decision: _decision_pb2.Decision
    delay_ms: int
    error: str
    fail_attempts: int
    raw: str
    retry_after_ms: int
    usage: Usage
    def __init__(self, decision: _Optional[_Union[_decision_pb2.Decision, _Mapping]] = ..., raw: _Optional[str] = ..., error: _Optional[str] = ..., usage: _Optional[_Union[Usage, _Mapping]] = ..., delay_ms: _Optional[int] = ..., fail_attempts: _Optional[int] = ..., retry_after_ms: _Optional[int] = ..., chunks: _Optional[_Iterable[_Union[ScriptedChunk, _Mapping]]] = ...) -> None: ...

class TaskContract(_message.Message):
    __slots__ = ["approval", "budget", "checks", "delegation", "goal", "inputs", "labels", "model", "priority", "tools"]
    class LabelsEntry(_message.Message):
        __slots__ = ["key", "value"]
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: str
        def __init__(self, key: _Optional[str] = ..., value: _Optional[str] = ...) -> None: ...
    APPROVAL_FIELD_NUMBER: _ClassVar[int]
    BUDGET_FIELD_NUMBER: _ClassVar[int]
    CHECKS_FIELD_NUMBER: _ClassVar[int]
    DELEGATION_FIELD_NUMBER: _ClassVar[int]
    GOAL_FIELD_NUMBER: _ClassVar[int]
    INPUTS_FIELD_NUMBER: _ClassVar[int]
    LABELS_FIELD_NUMBER: _ClassVar[int]
    MODEL_FIELD_NUMBER: _ClassVar[int]
    PRIORITY_FIELD_NUMBER: _ClassVar[int]
    TOOLS_FIELD_NUMBER: _ClassVar[int]
    approval: ApprovalPolicy
    budget: Budget
    checks: _containers.RepeatedCompositeFieldContainer[Check]
    delegation: DelegationPolicy
    goal: str
    inputs: _struct_pb2.Struct
    labels: _containers.ScalarMap[str, str]
    model: ModelSpec
    priority: int
    tools: _containers.RepeatedCompositeFieldContainer[ToolGrant]
    def __init__(self, goal: _Optional[str] = ..., inputs: _Optional[_Union[_struct_pb2.Struct, _Mapping]] = ..., tools: _Optional[_Iterable[_Union[ToolGrant, _Mapping]]] = ..., budget: _Optional[_Union[Budget, _Mapping]] = ..., checks: _Optional[_Iterable[_Union[Check, _Mapping]]] = ..., model: _Optional[_Union[ModelSpec, _Mapping]] = ..., approval: _Optional[_Union[ApprovalPolicy, _Mapping]] = ..., labels: _Optional[_Mapping[str, str]] = ..., delegation: _Optional[_Union[DelegationPolicy, _Mapping]] = ..., priority: _Optional[int] = ...) -> None: ...

class ToolGrant(_message.Message):
    __slots__ = ["approvals", "description", "input_schema", "name", "policy_service", "rules", "tier"]
    APPROVALS_FIELD_NUMBER: _ClassVar[int]
    DESCRIPTION_FIELD_NUMBER: _ClassVar[int]
    INPUT_SCHEMA_FIELD_NUMBER: _ClassVar[int]
    NAME_FIELD_NUMBER: _ClassVar[int]
    POLICY_SERVICE_FIELD_NUMBER: _ClassVar[int]
    RULES_FIELD_NUMBER: _ClassVar[int]
    TIER_FIELD_NUMBER: _ClassVar[int]
    approvals: int
    description: str
    input_schema: _struct_pb2.Struct
    name: str
    policy_service: str
    rules: _containers.RepeatedCompositeFieldContainer[PolicyRule]
    tier: ToolTier
    def __init__(self, name: _Optional[str] = ..., description: _Optional[str] = ..., input_schema: _Optional[_Union[_struct_pb2.Struct, _Mapping]] = ..., tier: _Optional[_Union[ToolTier, str]] = ..., rules: _Optional[_Iterable[_Union[PolicyRule, _Mapping]]] = ..., approvals: _Optional[int] = ..., policy_service: _Optional[str] = ...) -> None: ...

class Usage(_message.Message):
    __slots__ = ["cache_read_input_tokens", "cache_write_input_tokens", "input_tokens", "output_tokens"]
    CACHE_READ_INPUT_TOKENS_FIELD_NUMBER: _ClassVar[int]
    CACHE_WRITE_INPUT_TOKENS_FIELD_NUMBER: _ClassVar[int]
    INPUT_TOKENS_FIELD_NUMBER: _ClassVar[int]
    OUTPUT_TOKENS_FIELD_NUMBER: _ClassVar[int]
    cache_read_input_tokens: int
    cache_write_input_tokens: int
    input_tokens: int
    output_tokens: int
    def __init__(self, input_tokens: _Optional[int] = ..., output_tokens: _Optional[int] = ..., cache_write_input_tokens: _Optional[int] = ..., cache_read_input_tokens: _Optional[int] = ...) -> None: ...

class PolicyEffect(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = []

class ToolTier(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = []

class BudgetAction(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = []
