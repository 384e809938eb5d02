from google.protobuf import struct_pb2 as _struct_pb2
from google.protobuf.internal import containers as _containers
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from typing import ClassVar as _ClassVar, Iterable as _Iterable, Mapping as _Mapping, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class AskHuman(_message.Message):
    __slots__ = ["question"]
    QUESTION_FIELD_NUMBER: _ClassVar[int]
    question: str
    def __init__(self, question: _Optional[str] = ...) -> None: ...

class Decision(_message.Message):
    __slots__ = ["ask_human", "delegate", "final_answer", "tool_call"]
    ASK_HUMAN_FIELD_NUMBER: _ClassVar[int]
    DELEGATE_FIELD_NUMBER: _ClassVar[int]
    FINAL_ANSWER_FIELD_NUMBER: _ClassVar[int]
    TOOL_CALL_FIELD_NUMBER: _ClassVar[int]
    ask_human: AskHuman
    delegate: Delegate
    final_answer: FinalAnswer
    tool_call: ToolCall
    def __init__(self, tool_call: _Optional[_Union[ToolCall, _Mapping]] = ..., final_answer: _Optional[_Union[FinalAnswer, _Mapping]] = ..., ask_human: _Optional[_Union[AskHuman, _Mapping]] = ..., delegate: _Optional[_Union[Delegate, _Mapping]] = ...) -> None: ...

class Delegate(_message.Message):
    __slots__ = ["tasks"]
    TASKS_FIELD_NUMBER: _ClassVar[int]
    tasks: _containers.RepeatedCompositeFieldContainer[DelegatedTask]
    def __init__(self, tasks: _Optional[_Iterable[_Union[DelegatedTask, _Mapping]]] = ...) -> None: ...

class DelegatedBudget(_message.Message):
    __slots__ = ["max_cost_usd", "max_steps", "max_tokens", "max_tool_calls"]
    MAX_COST_USD_FIELD_NUMBER: _ClassVar[int]
    MAX_STEPS_FIELD_NUMBER: _ClassVar[int]
    MAX_TOKENS_FIELD_NUMBER: _ClassVar[int]
    MAX_TOOL_CALLS_FIELD_NUMBER: _ClassVar[int]
    max_cost_usd: float
    max_steps: int
    max_tokens: int
    max_tool_calls: int
    def __init__(self, max_steps: _Optional[int] = ..., max_tokens: _Optional[int] = ..., max_cost_usd: _Optional[float] = ..., max_tool_calls: _Optional[int] = ...) -> None: ...

class DelegatedTask(_message.Message):
    __slots__ = ["budget", "completion", "evidence", "files", "inputs", "question", "tools"]
    BUDGET_FIELD_NUMBER: _ClassVar[int]
    COMPLETION_FIELD_NUMBER: _ClassVar[int]
    EVIDENCE_FIELD_NUMBER: _ClassVar[int]
    FILES_FIELD_NUMBER: _ClassVar[int]
    INPUTS_FIELD_NUMBER: _ClassVar[int]
    QUESTION_FIELD_NUMBER: _ClassVar[int]
    TOOLS_FIELD_NUMBER: _ClassVar[int]
    budget: DelegatedBudget
    completion: str
    evidence: str
    files: _containers.RepeatedScalarFieldContainer[str]
    inputs: _struct_pb2.Struct
    question: str
    tools: _containers.RepeatedCompositeFieldContainer[DelegatedTool]
    def __init__(self, question: _Optional[str] = ..., inputs: _Optional[_Union[_struct_pb2.Struct, _Mapping]] = ..., files: _Optional[_Iterable[str]] = ..., tools: _Optional[_Iterable[_Union[DelegatedTool, _Mapping]]] = ..., evidence: _Optional[str] = ..., completion: _Optional[str] = ..., budget: _Optional[_Union[DelegatedBudget, _Mapping]] = ...) -> None: ...

class DelegatedTool(_message.Message):
    __slots__ = ["name", "tier"]
    NAME_FIELD_NUMBER: _ClassVar[int]
    TIER_FIELD_NUMBER: _ClassVar[int]
    name: str
    tier: str
    def __init__(self, name: _Optional[str] = ..., tier: _Optional[str] = ...) -> None: ...

class FinalAnswer(_message.Message):
    __slots__ = ["data", "text"]
    DATA_FIELD_NUMBER: _ClassVar[int]
    TEXT_FIELD_NUMBER: _ClassVar[int]
    data: _struct_pb2.Value
    text: str
    def __init__(self, text: _Optional[str] = ..., data: _Optional[_Union[_struct_pb2.Value, _Mapping]] = ...) -> None: ...

class ToolCall(_message.Message):
    __slots__ = ["arguments", "call_id", "tool"]
    ARGUMENTS_FIELD_NUMBER: _ClassVar[int]
    CALL_ID_FIELD_NUMBER: _ClassVar[int]
    TOOL_FIELD_NUMBER: _ClassVar[int]
    arguments: _struct_pb2.Struct
    call_id: str
    tool: str
    def __init__(self, tool: _Optional[str] = ..., arguments: _Optional[_Union[_struct_pb2.Struct, _Mapping]] = ..., call_id: _Optional[str] = ...) -> None: ...
