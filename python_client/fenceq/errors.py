"""Package errors, mapped from SQLSTATE codes.

``sql/errcodes.tsv`` is the single table of fenceq's codes: the SQL raises
them, this module loads them, and the README's table is generated from them.
``translate`` is the one boundary where driver errors become package errors;
the original stays reachable as ``__cause__`` and never enters the message.
"""

from __future__ import annotations

import csv
import enum
from dataclasses import dataclass

from ._resources import errcodes_path


class ErrorCode(str, enum.Enum):
    CONFIG = "CONFIG"
    QUEUE_SUBMISSION_CONFLICT = "QUEUE_SUBMISSION_CONFLICT"
    QUEUE_CLAIM_CONFLICT = "QUEUE_CLAIM_CONFLICT"
    QUEUE_PERSISTENCE_FAILED = "QUEUE_PERSISTENCE_FAILED"


@dataclass(frozen=True)
class CodeInfo:
    sqlstate: str
    reason: str
    code: ErrorCode
    meaning: str


def _load_codes() -> dict[str, CodeInfo]:
    with open(errcodes_path(), encoding="utf-8", newline="") as handle:
        rows = csv.DictReader(handle, delimiter="\t")
        return {
            row["sqlstate"]: CodeInfo(
                row["sqlstate"], row["reason"], ErrorCode(row["package_code"]), row["meaning"]
            )
            for row in rows
        }


CODES: dict[str, CodeInfo] = _load_codes()


class FenceqError(Exception):
    """Base class: ``.code`` (ErrorCode), ``.reason`` and ``.sqlstate``."""

    code: ErrorCode = ErrorCode.QUEUE_PERSISTENCE_FAILED

    def __init__(self, message: str, *, reason: str, sqlstate: str | None):
        super().__init__(message)
        self.reason = reason
        self.sqlstate = sqlstate


class ConfigError(FenceqError):
    code = ErrorCode.CONFIG


class SubmissionConflict(FenceqError):
    code = ErrorCode.QUEUE_SUBMISSION_CONFLICT


class ClaimConflict(FenceqError):
    code = ErrorCode.QUEUE_CLAIM_CONFLICT


class PersistenceFailed(FenceqError):
    code = ErrorCode.QUEUE_PERSISTENCE_FAILED

    def __init__(self, message: str = "fenceq: the database call failed or its outcome is unknown"):
        super().__init__(message, reason="unavailable", sqlstate=None)


_CLASSES = {
    ErrorCode.CONFIG: ConfigError,
    ErrorCode.QUEUE_SUBMISSION_CONFLICT: SubmissionConflict,
    ErrorCode.QUEUE_CLAIM_CONFLICT: ClaimConflict,
}


def fenceq_error(sqlstate: str, message: str | None = None) -> FenceqError:
    """The package error for one of fenceq's own QF codes."""
    info = CODES[sqlstate]
    return _CLASSES[info.code](message or f"fenceq: {info.reason}", reason=info.reason, sqlstate=sqlstate)


def config_error(sqlstate: str, message: str) -> ConfigError:
    error = fenceq_error(sqlstate, f"fenceq: {message}")
    assert isinstance(error, ConfigError)
    return error


def translate(sqlstate: str | None, message: str | None = None, detail: str | None = None) -> FenceqError:
    """Map a SQLSTATE (and, for fenceq's own codes, its authored message) to
    a package error. Driver messages are never copied: only QF messages,
    which fenceq writes itself and which never echo values."""
    if sqlstate in CODES:
        text = message or f"fenceq: {CODES[sqlstate].reason}"
        if detail:
            text = f"{text} ({detail})"
        return fenceq_error(sqlstate, text)
    if sqlstate is not None and sqlstate.startswith("22"):
        return ConfigError("fenceq: an argument was rejected by the database",
                           reason="invalid_request", sqlstate=sqlstate)
    if sqlstate == "42501":
        return ConfigError("fenceq: permission denied", reason="permission_denied", sqlstate=sqlstate)
    if sqlstate == "42883":
        return ConfigError("fenceq: no such function for these arguments",
                           reason="invalid_request", sqlstate=sqlstate)
    return PersistenceFailed()


def markdown_table() -> str:
    """The error-code table for the docs, generated from sql/errcodes.tsv."""
    lines = ["| SQLSTATE | reason | package code | when |", "|---|---|---|---|"]
    lines += [f"| {i.sqlstate} | {i.reason} | {i.code.value} | {i.meaning} |" for i in CODES.values()]
    lines += [
        "| class 22 (e.g. 22P02: an argument the database rejects before fenceq runs) "
        "| invalid_request | CONFIG | Malformed literal for a parameter's type. |",
        "| 42501 | permission_denied | CONFIG | The role may not call this function. |",
        "| 42883 | invalid_request | CONFIG | No function matches these argument names or types. |",
        "| anything else (lost connection, uncertain commit, 40001, 40P01, 57P01, server error) "
        "| unavailable | QUEUE_PERSISTENCE_FAILED | The outcome is unknown: retry the same submission, "
        "or recover_claim with the same token. |",
    ]
    return "\n".join(lines)
