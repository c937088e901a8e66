"""Payment settings, from the ``[payments]`` table of the config file.

```toml
[payments]
queue = "charges"             # the queue of the charge jobs (`recon payments import` queues one per payment)
```

A worker started without ``--queues`` works this queue with the others its handlers declare; its limits are
``[queues.NAME]``'s like any queue's (``max_depth`` bounds an import's charge jobs).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from recon.config import unknown
from recon.db.payment_store import CHARGE_QUEUE
from recon.errors import ConfigError

QUEUE_DEFAULT = CHARGE_QUEUE
#: the longest queue name accepted (it is stored with every job and printed in every listing)
QUEUE_MAX_CHARS = 100


@dataclass(frozen=True, slots=True)
class PaymentsConfig:
    queue: str = QUEUE_DEFAULT

    @classmethod
    def from_table(cls, table: Mapping[str, Any] | None, *, source: str = "config") -> PaymentsConfig:
        table = dict(table or {})
        where = f"{source}: payments"
        for key in table:
            if key != "queue":
                raise unknown("key", key, {"queue"}, f"{where}.")
        queue = table.get("queue", QUEUE_DEFAULT)
        if not isinstance(queue, str) or not queue.strip() or queue != queue.strip() \
                or len(queue) > QUEUE_MAX_CHARS:
            raise ConfigError(f"{where}.queue: must be a queue name of 1 to {QUEUE_MAX_CHARS} characters without "
                              f"surrounding spaces (got {queue!r})")
        return cls(queue=queue)
