"""``[close]``: the rules that match payouts to bank credits, with per-PSP overrides.

```toml
[close]
window_days = 3            # a credit may be booked this many days either side of the expected arrival
bank_fee_tolerance = 0     # minor units a bank may keep from a credit (0: sums must be equal)
max_group = 4              # N:1 / 1:N: at most this many payouts in one credit, or credits of one payout
max_candidates = 24        # a group search looks through at most this many candidates (bounded work)
queue = "close"            # the queue of the payouts jobs webhooks queue

[close.psp.adyen]          # the same keys but queue, for one PSP
window_days = 5
```

Unknown keys are errors with the nearest valid name; every number is bounded (``recon.close.match``).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from typing import Any

from recon.close.match import MatchRules
from recon.config import unknown
from recon.errors import ConfigError

QUEUE_DEFAULT = "close"
_RULE_KEYS = ("window_days", "bank_fee_tolerance", "max_group", "max_candidates")
_KEYS = {*_RULE_KEYS, "queue", "psp"}


@dataclass(frozen=True, slots=True)
class CloseConfig:
    rules: MatchRules = field(default_factory=MatchRules)
    queue: str = QUEUE_DEFAULT
    per_psp: Mapping[str, MatchRules] = field(default_factory=dict)

    def rules_for(self, psp: str) -> MatchRules:
        return self.per_psp.get(psp, self.rules)

    @classmethod
    def from_table(cls, table: Mapping[str, Any] | None, *, source: str = "config") -> CloseConfig:
        table = dict(table or {})
        where = f"{source}: close"
        for key in table:
            if key not in _KEYS:
                raise unknown("key", key, _KEYS, f"{where}.")
        rules = _rules(MatchRules(), table, where)
        queue = table.get("queue", QUEUE_DEFAULT)
        if not isinstance(queue, str) or not queue.replace("-", "").replace("_", "").isalnum() or len(queue) > 64:
            raise ConfigError(f"{where}.queue: must be a queue name (letters, digits, - and _)")
        per_psp: dict[str, MatchRules] = {}
        psps = table.get("psp", {})
        if not isinstance(psps, Mapping):
            raise ConfigError(f"{where}.psp: must be a table of [close.psp.NAME] tables")
        for name, sub in psps.items():
            if not isinstance(sub, Mapping):
                raise ConfigError(f"{where}.psp.{name}: must be a table")
            for key in sub:
                if key not in _RULE_KEYS:
                    raise unknown("key", key, _RULE_KEYS, f"{where}.psp.{name}.")
            per_psp[name] = _rules(rules, sub, f"{where}.psp.{name}")
        return cls(rules=rules, queue=queue, per_psp=per_psp)


def _rules(base: MatchRules, table: Mapping[str, Any], where: str) -> MatchRules:
    rules = replace(base, **{k: table[k] for k in _RULE_KEYS if k in table})
    try:
        rules.validate(where)
    except ValueError as exc:
        raise ConfigError(str(exc)) from None
    return rules
