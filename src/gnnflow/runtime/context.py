"""Where a rank runs: its index, the group size and its device (what every rank's code receives)."""

from __future__ import annotations

from dataclasses import dataclass

import torch


@dataclass
class RankContext:
    """Where this rank runs: its index, the group size and the device."""

    rank: int = 0
    world_size: int = 1
    device: torch.device = torch.device("cpu")
    #: index among the ranks of this host (picks the device); equals ``rank`` on one host
    local_rank: int = 0

    @property
    def is_distributed(self) -> bool:
        return self.world_size > 1
