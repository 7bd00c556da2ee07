"""A client for `idem serve`, the idem sidecar: side effects that happen
exactly once, from Python, with the standard library only.

    from idem_client import IdemClient, idempotent

    client = IdemClient("http://127.0.0.1:7676", token=os.environ["IDEM_SERVE_TOKEN"])

    with client.idempotent(operation) as call:
        if call.should_run:
            call.result = charge(call.key, call.fence)

See README.md, and docs/guide/client-python.md in the idem repository.
"""

from .answers import (
    BeginAnswer,
    ConflictAnswer,
    Derivation,
    ExecuteAnswer,
    Finished,
    Heartbeat,
    InProgressAnswer,
    Operation,
    Outcome,
    RejectedAnswer,
    ReplayAnswer,
    Resolved,
    Run,
)
from .client import IdemClient, default_caller
from .errors import (
    BadRequest,
    Conflict,
    FailedPermanently,
    IdemError,
    InProgress,
    NotAmendable,
    NotInProgress,
    NotWaitingForReview,
    OperationConflict,
    Permanent,
    PolicyFailed,
    PolicyNotRegistered,
    PolicyRefused,
    ProblemError,
    Rejected,
    StaleFence,
    TooLarge,
    TransportError,
    Unauthorized,
    Unavailable,
    UnknownKey,
)
from .idempotent import Call, current_claim, decode_json, encode_json, idempotent

__version__ = "0.1.0"

__all__ = [
    "BadRequest",
    "BeginAnswer",
    "Call",
    "Conflict",
    "ConflictAnswer",
    "Derivation",
    "ExecuteAnswer",
    "FailedPermanently",
    "Finished",
    "Heartbeat",
    "IdemClient",
    "IdemError",
    "InProgress",
    "InProgressAnswer",
    "NotAmendable",
    "NotInProgress",
    "NotWaitingForReview",
    "Operation",
    "OperationConflict",
    "Outcome",
    "Permanent",
    "PolicyFailed",
    "PolicyNotRegistered",
    "PolicyRefused",
    "ProblemError",
    "Rejected",
    "RejectedAnswer",
    "ReplayAnswer",
    "Resolved",
    "Run",
    "StaleFence",
    "TooLarge",
    "TransportError",
    "Unauthorized",
    "Unavailable",
    "UnknownKey",
    "current_claim",
    "decode_json",
    "default_caller",
    "encode_json",
    "idempotent",
]
