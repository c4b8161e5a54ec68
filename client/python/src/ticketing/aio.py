"""placeholder"""

from __future__ import annotations


class AsyncClient: ...


class AsyncLease: ...
