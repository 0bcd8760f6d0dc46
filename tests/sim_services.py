"""Small, honest ServiceTimes for the simulator and fleet-sizing tests: closed-form step times whose queueing
behaviour is known (constant, linear in tokens, linear in batch and context). Not fakes: each is a complete
implementation of the protocol with a physical reading, just a simple one."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class TokenLinear:
    """Every call costs `per_call` plus `per_token` for each token it computes (batch x length): a
    compute-bound server. Decode steps charge one token per sequence (`per_token` x batch) plus the KV read,
    `per_kv` per sequence-position (batch x context)."""

    per_call: float = 0.0
    per_token: float = 0.001
    per_kv: float = 0.0
    band: float = 0.1
    source: str = "assumption"

    def prefill_s(self, batch: int, length: int) -> float:
        return self.per_call + self.per_token * batch * length

    def decode_step_s(self, batch: int, context: int) -> float:
        return self.per_call + self.per_token * batch + self.per_kv * batch * context

    encoder_s = prefill_s  # an encoder pass computes every token, as a prefill does


@dataclass(frozen=True)
class Constant:
    """Every call takes the same time whatever its shape (a deterministic server)."""

    seconds: float = 1.0
    band: float = 0.0
    source: str = "assumption"

    def prefill_s(self, batch: int, length: int) -> float:
        return self.seconds

    decode_step_s = encoder_s = prefill_s  # the same time whatever the call


@dataclass(frozen=True)
class GpuLike:
    """A memory-bound decoder: each step reads the weights once (`weights_s`) and every sequence's KV cache
    (`kv_s` per position); prefill is compute-bound (`prefill_token_s` per token, plus a launch overhead)."""

    weights_s: float = 0.02
    kv_s: float = 5e-8
    per_seq_s: float = 2e-4
    prefill_token_s: float = 6e-5
    overhead_s: float = 0.01
    band: float = 0.15
    source: str = "projected"

    def prefill_s(self, batch: int, length: int) -> float:
        return self.overhead_s + self.prefill_token_s * batch * length

    def decode_step_s(self, batch: int, context: int) -> float:
        return self.weights_s + batch * (self.per_seq_s + self.kv_s * context)

    encoder_s = prefill_s  # an encoder pass is compute-bound like a prefill
