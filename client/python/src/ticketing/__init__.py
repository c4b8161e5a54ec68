"""Ticketing: the official Python client of the Ticketing lock server.

Blocking (thread-safe)::

    import ticketing

    with ticketing.Client(["127.0.0.1:7470"], token=None) as client:
        with client.lock("orders/42", lease=30, wait=10) as lease:
            write_with_fencing(lease.token)

asyncio::

    async with ticketing.AsyncClient(["127.0.0.1:7470"]) as client:
        async with client.lock("orders/42", lease=30, wait=10) as lease:
            await write_with_fencing(lease.token)
"""

from ._common import CLIENT_VERSION as __version__
from ._common import CancelToken, Duration, Key, LeaseBase
from .aio import AsyncClient, AsyncLease
from .client import Client, Lease
from .errors import (
    AuthError,
    Cancelled,
    ClientClosed,
    ClosedIndeterminate,
    ConnectError,
    Indeterminate,
    InsufficientLease,
    InvalidArgument,
    LockBusy,
    LockTimeout,
    NoLeader,
    NotHolder,
    NotSupported,
    ProtocolError,
    TicketingError,
    TLSError,
)

__all__ = [
    "AsyncClient",
    "AsyncLease",
    "AuthError",
    "CancelToken",
    "Cancelled",
    "Client",
    "ClientClosed",
    "ClosedIndeterminate",
    "ConnectError",
    "Duration",
    "Indeterminate",
    "InsufficientLease",
    "InvalidArgument",
    "Key",
    "Lease",
    "LeaseBase",
    "LockBusy",
    "LockTimeout",
    "NoLeader",
    "NotHolder",
    "NotSupported",
    "ProtocolError",
    "TLSError",
    "TicketingError",
    "__version__",
]
