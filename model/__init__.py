"""Python models of HeteroReason, one subpackage per concern: ``numerics`` (the draft model's
float and W8A8 references), ``golden`` (golden models of the control RTL), ``timing`` (GPU,
link and energy models; ``timing.fpga``: the decoder's cycle model, boards, design search and
calibration), ``workload`` (traces), ``system`` (the scheduler), ``controller`` (BRSD) and
``experiments`` (the paper's reproduction). The one-call FPGA answer::

    from heteroreason.model.timing.fpga.platform import draft_ms_per_token
    draft_ms_per_token("qwen2.5-0.5b", "u280-300", 1024)   # RTL-calibrated ms per draft token
"""
