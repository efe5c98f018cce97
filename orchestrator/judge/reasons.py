"""The one text of a failed claim, for every verdict that files one (judging, passes, across runs)."""

from __future__ import annotations

from ..transcript.claims import ClaimResult

MAX_FAILURES_SHOWN = 5


def claim_reason(claim: ClaimResult, prefix: str = "", context: str = "") -> str:
    """The one text of a failed claim: what failed, what it says, and its first failures."""
    lines = [f"{prefix}{claim.kind} {claim.id!r} failed{context}" + (f" ({claim.says})" if claim.says else "")]
    lines += [f"  {failure}" for failure in claim.failures[:MAX_FAILURES_SHOWN]]
    if len(claim.failures) > MAX_FAILURES_SHOWN:
        lines.append(f"  ... and {len(claim.failures) - MAX_FAILURES_SHOWN} more")
    return "\n".join(lines)
