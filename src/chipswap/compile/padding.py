"""The one padding rule compile and serve share: how requests become a bucket-shaped input.

Token ids are right-padded with the model's ``pad_token_id`` and the attention mask with 0; a group smaller
than the compiled batch gets whole padding rows. `chipswap compile` checks each artifact on inputs padded
exactly this way, and the serving router pads live requests with the same function. torch is imported inside.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from chipswap.errors import ChipswapError

if TYPE_CHECKING:  # pragma: no cover
    import torch


class InputTooLong(ChipswapError):
    """A request is longer than every compiled sequence bucket."""

    def __init__(self, length: int, limit: int) -> None:
        self.length = length
        self.limit = limit
        super().__init__(
            f"input of {length} tokens is longer than the largest compiled bucket ({limit} tokens);"
            f" compile a bucket of at least {length} (chipswap compile --seq-len) or enable truncation"
        )


def pad_batch(
    token_ids: Sequence[Sequence[int]],
    seq_len: int,
    batch: int,
    pad_token_id: int,
    *,
    attention_masks: Sequence[Sequence[int]] | None = None,
    dtype: Any = None,
) -> dict[str, torch.Tensor]:
    """Right-pad each row to ``seq_len`` (ids: pad_token_id, mask: 0); add whole padding rows up to
    ``batch``."""
    import torch

    if len(token_ids) > batch:
        raise ChipswapError(f"{len(token_ids)} requests do not fit a compiled batch of {batch}; split them")
    dt = dtype or torch.long
    ids = torch.full((batch, seq_len), int(pad_token_id), dtype=dt)
    mask = torch.zeros((batch, seq_len), dtype=dt)
    for i, row in enumerate(token_ids):
        row_t = torch.as_tensor(list(row) if not hasattr(row, "shape") else row, dtype=dt).reshape(-1)
        n = int(row_t.numel())
        if n > seq_len:
            raise InputTooLong(n, seq_len)
        ids[i, :n] = row_t
        if attention_masks is not None:
            m = torch.as_tensor(attention_masks[i], dtype=dt).reshape(-1)
            mask[i, : m.numel()] = m
        else:
            mask[i, :n] = 1
    return {"input_ids": ids, "attention_mask": mask}
