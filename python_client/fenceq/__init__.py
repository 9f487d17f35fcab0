"""fenceq: a fenced, owned work queue that lives in the database."""

from .client import AsyncClient, Client, connect, connect_async
from .errors import (ClaimConflict, ConfigError, ErrorCode, FenceqError, PersistenceFailed,
                     SubmissionConflict)
from .locks import LockBusy, LockLost
from .tasks import JobHandle, Task, TaskCancelled, TaskError, TaskExpired, TaskFailed, TaskMissing
from .types import (ActivityBucket, Attempt, Claim, ClaimState, DeadLetter, Dispatch, DispatchCandidate, Fence, Job,
                    JobEvent, JobPage, QueueStats, ReapResult, Schedule, SchemaCheck, SearchedJob, new_claim_token)
from .waiting import WaitTimeout
from .worker import (App, AsyncJobContext, Dispatched, JobCancelled, JobContext, LeaseLost, NonRetryable, PollResult,
                     Reconciler, Worker)

__all__ = [
    "ActivityBucket", "App", "AsyncClient", "AsyncJobContext", "Attempt", "Claim", "ClaimConflict", "ClaimState", "Client",
    "ConfigError", "DeadLetter", "Dispatch", "DispatchCandidate", "Dispatched", "ErrorCode", "Fence", "FenceqError",
    "Job", "JobCancelled", "JobContext", "JobEvent", "JobPage", "LeaseLost", "LockBusy", "LockLost", "NonRetryable",
    "PersistenceFailed", "PollResult", "QueueStats", "ReapResult", "Reconciler", "SchemaCheck", "SearchedJob",
    "SubmissionConflict", "Worker", "connect", "connect_async", "new_claim_token",
    "Schedule", "WaitTimeout", "JobHandle", "Task", "TaskCancelled", "TaskError", "TaskExpired", "TaskFailed",
    "TaskMissing",
]
