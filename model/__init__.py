"""Python models of HeteroReason. The one-call FPGA answer::

    from heteroreason.model import draft_ms_per_token
    draft_ms_per_token("qwen2.5-0.5b", "u280-300", 1024)   # RTL-calibrated ms per draft token
"""

from heteroreason.model.timing.fpga.platform import draft_ms_per_token

__all__ = ["draft_ms_per_token"]
